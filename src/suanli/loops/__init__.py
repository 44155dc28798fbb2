"""Periodic drivers inside the server (leader only): the scheduler cycle."""
