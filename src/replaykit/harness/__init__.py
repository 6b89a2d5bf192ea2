"""Task-agnostic replay harness. Nothing here knows about a particular task."""
