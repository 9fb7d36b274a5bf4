from trnsim.cli import entry

if __name__ == "__main__":  # worker processes (trnsim sweep --workers N) import this file again
    entry()
