# Several WhatsApp numbers, each at its rate (tools/local/demo_senders.py): 1,000
# rooms x 2 messages from 3 numbers at 10 messages/s each; fails if a room is
# sent from two numbers, a number passes its rate in any second (judged from
# the fake platform's record), a 130429 comes back, or a message is lost.
SENDERS_ARGS ?=
.PHONY: demo-senders
demo-senders: venv
	$(PY) -m tools.local.demo_senders $(SENDERS_ARGS)
