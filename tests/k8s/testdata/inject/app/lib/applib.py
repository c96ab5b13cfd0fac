"""A module the app finds only through its image's PYTHONPATH."""

NAME = "applib"
