import sys

try:
    from trnsim.cli import entry
except ModuleNotFoundError as e:  # a checkout whose dependencies are not installed
    if (e.name or "").split(".")[0] == "trnsim":
        raise
    print(f"trnsim needs its dependencies (missing: {e.name}): pip install .", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":  # worker processes (trnsim sweep --workers N) import this file again
    entry()
