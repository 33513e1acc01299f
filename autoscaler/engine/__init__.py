"""The policy engine: observe -> decide -> settle -> act -> record, through small ports."""
