"""trnsim: an emulator and discrete-event timing simulator of AWS Trainium chips."""

__version__ = "0.1.0"
