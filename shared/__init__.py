"""baton's shared package: the room state machine and its adapters, imported by functions/."""
