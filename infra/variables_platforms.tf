# The platforms (shared/providers/): WhatsApp's numbers and senders,
# Messenger's Page, Instagram's account, what counts as an ack, and pacing.

variable "whatsapp_api_base" {
  description = "WHATSAPP_API_BASE: base URL of the WhatsApp Cloud API."
  type        = string
  default     = "https://graph.facebook.com"

  validation {
    condition     = can(regex("^https://[^/]+$", var.whatsapp_api_base))
    error_message = "whatsapp_api_base must be an https:// URL with no path or trailing slash."
  }
}

variable "whatsapp_api_version" {
  description = "WHATSAPP_API_VERSION: Graph API version of the send path."
  type        = string
  default     = "v21.0"
}

variable "whatsapp_phone_number_id" {
  description = "WHATSAPP_PHONE_NUMBER_ID: id of the sending WhatsApp Business phone number (Meta app dashboard, WhatsApp > API Setup; not a secret)."
  type        = string

  validation {
    condition     = can(regex("^[0-9]{5,20}$", var.whatsapp_phone_number_id))
    error_message = "whatsapp_phone_number_id is the numeric phone-number id of the Meta app dashboard, not the phone number."
  }
}

variable "whatsapp_senders" {
  description = "WHATSAPP_SENDERS: the WhatsApp numbers to send from, comma-separated phone_number_id[:rate] (rate in messages/s, default whatsapp_sender_rate); rooms are spread over them by rendezvous hash. Empty: whatsapp_phone_number_id alone. Add a number at the end; a room keeps its number while it holds messages."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^([0-9]{1,20}(:[0-9]+)?(,[0-9]{1,20}(:[0-9]+)?)*)?$", replace(var.whatsapp_senders, " ", "")))
    error_message = "whatsapp_senders is a comma-separated list of phone_number_id[:rate], e.g. 1000001:75,1000002:75."
  }
}

variable "whatsapp_sender_rate" {
  description = "WHATSAPP_SENDER_RATE: messages/s one WhatsApp number may send, shared by every instance (a little below the platform's 80/s default tier, or its upgraded 1,000/s tier); 0: not limited by baton."
  type        = number
  default     = 75

  validation {
    condition     = var.whatsapp_sender_rate >= 0 && floor(var.whatsapp_sender_rate) == var.whatsapp_sender_rate
    error_message = "whatsapp_sender_rate is a whole number of messages/s, 0 or more."
  }
}

variable "whatsapp_sent_proof" {
  description = "WHATSAPP_SENT_PROOF: \"on\" (default) lets a WhatsApp `sent` status record its attempt as taken by the platform when the attempt's send outcome is not known to be accepted (one read of the room per WhatsApp message, a blind write only then; docs/cost.md prices it), so an attempt whose send outcome was unknown times out instead of being sent twice; \"off\" only logs `sent`."
  type        = string
  default     = "on"

  validation {
    condition     = contains(["on", "off"], var.whatsapp_sent_proof)
    error_message = "whatsapp_sent_proof must be on or off."
  }
}

variable "platforms" {
  description = "PROVIDERS: the platforms this deployment sends to and takes webhooks from (whatsapp, messenger, instagram). Each one's secrets are created here and need a version before the functions deploy."
  type        = list(string)
  default     = ["whatsapp"]

  validation {
    condition     = length(var.platforms) > 0 && alltrue([for p in var.platforms : contains(["whatsapp", "messenger", "instagram"], p)])
    error_message = "platforms is a non-empty list of whatsapp, messenger, instagram."
  }
}

variable "messenger_page_id" {
  description = "MESSENGER_PAGE_ID: the Facebook Page that sends Messenger messages (not a secret); empty unless platforms has messenger."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^([0-9]{5,20})?$", var.messenger_page_id))
    error_message = "messenger_page_id is the numeric Page id, or empty."
  }
}

variable "instagram_account_id" {
  description = "INSTAGRAM_ACCOUNT_ID: the Instagram professional account that sends (not a secret); empty unless platforms has instagram."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^([0-9]{5,20})?$", var.instagram_account_id))
    error_message = "instagram_account_id is the numeric account id, or empty."
  }
}

variable "ack_levels" {
  description = "ACK_LEVEL_*: what acks a message, per platform: delivered (a delivered or read receipt), read, or accepted (the send's 2xx). The ack timeout is the backstop of every level."
  type        = object({ whatsapp = string, messenger = string, instagram = string })
  default     = { whatsapp = "delivered", messenger = "delivered", instagram = "read" }

  validation {
    condition     = alltrue([for level in values(var.ack_levels) : contains(["delivered", "read", "accepted"], level)])
    error_message = "each ack level is delivered, read or accepted."
  }
}

variable "watermark_margin_ms" {
  description = "WATERMARK_MARGIN_MS: ms past a send's return a Messenger watermark must be to ack it without mids (0..60000)."
  type        = number
  default     = 0

  validation {
    condition     = var.watermark_margin_ms >= 0 && var.watermark_margin_ms <= 60000 && floor(var.watermark_margin_ms) == var.watermark_margin_ms
    error_message = "watermark_margin_ms is a whole number of ms from 0 to 60000."
  }
}

variable "pacing" {
  description = "PACE_*: per platform, a room's pair-rate bucket: one token per interval_ms (0: off), at most burst kept. WhatsApp: about one message every 6 s to one user, bursts up to 45 (error 131056)."
  type = object({
    whatsapp  = object({ interval_ms = number, burst = number })
    messenger = object({ interval_ms = number, burst = number })
    instagram = object({ interval_ms = number, burst = number })
  })
  default = {
    whatsapp  = { interval_ms = 6000, burst = 45 }
    messenger = { interval_ms = 0, burst = 45 }
    instagram = { interval_ms = 0, burst = 45 }
  }

  validation {
    condition     = alltrue([for p in values(var.pacing) : p.interval_ms >= 0 && p.burst >= 1 && floor(p.interval_ms) == p.interval_ms && floor(p.burst) == p.burst])
    error_message = "pacing: interval_ms is a whole number of ms, 0 or more; burst a whole number, 1 or more."
  }
}
