from trnsim.cli import main

if __name__ == "__main__":  # worker processes (trnsim sweep --workers N) import this file again
    main()
