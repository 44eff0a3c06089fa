"""What a compiled step costs: its collectives and memory (`hlo`), its
throughput timed interleaved (`timing`), and its FLOPs against a peak
(`utilisation`)."""
