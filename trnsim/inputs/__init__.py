"""Reading user files (traces and chip configs): YAML with the line of every mapping and
sequence kept (`positions`, `yaml_events`), JSON (`load`), and the vocabulary for one-line errors
that name the file, line and key (`validate`)."""
