"""Moved: the status error queue is read and replayed by the admin function
(shared/admin/error_queue.py); this name stays for existing imports."""

from shared.admin.error_queue import ERROR_QUEUE_SUFFIX, ErrorQueue, ErrorRecord

__all__ = ["ERROR_QUEUE_SUFFIX", "ErrorQueue", "ErrorRecord"]
