"""A small ResNet on digits: the pmap program, its port, and two wrong ports."""
