"""Reading user files (traces and chip configs): YAML with the line of every mapping and
sequence kept, and the vocabulary for one-line errors that name the file, line and key."""
