from trnsim.cli import entry

entry()
