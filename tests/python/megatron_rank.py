"""One rank of a two-node Megatron job reading a node-local copy: torch.distributed
over gloo (world size 2), then megatron-core's BlendedMegatronDatasetBuilder builds a
GPT dataset from PREFIX with the default index cache (beside the data), as
pretrain_gpt.py does without --data-cache-path: rank 0 builds and saves the indexes,
a barrier, then rank 1 loads them from where its own copy says they are.

Usage: megatron_rank.py PREFIX RANK PORT SAMPLES SEQ_LEN

Prints one JSON line: the rank and a digest of the samples it read. Exits 1 with
Megatron's error when the build fails (rank 1 finding no indexes).
"""

import datetime
import hashlib
import json
import os
import sys
import traceback

import numpy


class EndOfDocument:
    """What GPTDataset asks of a tokenizer: the ids it pads and ends documents with."""

    def __init__(self):
        self.eod = self.pad = 50256
        self.vocab_size = 50257
        self.unique_identifiers = {"class": "EndOfDocument", "eod": 50256}


def main():
    prefix, rank, port, samples, seq_len = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    # A peer that failed ends this rank's waits in a minute, not never.
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=seq_len,
        blend=([prefix], None),
        split="100,0,0",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=EndOfDocument(),
    )
    try:
        train = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()[0]
        digest = hashlib.blake2b()
        for index in range(samples):
            digest.update(numpy.asarray(train[index]["tokens"]).astype("<i8").tobytes())
        print(json.dumps({"rank": rank, "samples": samples, "digest": digest.hexdigest()}))
        dist.barrier()
    except Exception:
        traceback.print_exc()
        sys.exit(1)


main()
