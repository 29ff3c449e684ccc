"""Hardware and models: GPU and link profiles, topology, transformer FLOPs and memory."""
