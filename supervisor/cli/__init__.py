"""The command line: the click commands, `supervisor status` and `supervisor doctor`."""
