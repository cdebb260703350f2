"""Ways to split one sequence over many devices, each timed on the engine and the machine.

The ring, DeepSpeed-Ulysses, all-gather context parallelism (Llama 3), Ulysses x ring (USP)
and the double ring (LoongTrain). ``pieces`` stitches the timelines of their parts.
"""
