"""Memories: on-chip SBUF/PSUM tiles, HBM tensors, and the references instructions hold."""
