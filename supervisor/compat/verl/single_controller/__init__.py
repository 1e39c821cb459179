"""``verl.single_controller``."""
