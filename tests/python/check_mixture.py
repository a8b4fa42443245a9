"""Megatron reads a staged mixture as it blends datasets itself: megatron-core's
BlendedMegatronDatasetBuilder builds a blended GPT dataset from the file that
`ferry inspect NAME --megatron-args --cache DEST` wrote (what Megatron's
`--per-split-data-args-path` takes: per split, weights and absolute prefixes),
and every sample it gives is a run of tokens of one component's documents.

Usage: check_mixture.py DATA_ARGS_JSON SPLIT SEQ_LEN SAMPLES

Prints a JSON summary: the samples drawn from each component (by its prefix's
`c<index>-` name) and the blend's weights per component.
"""

import json
import os
import sys

import numpy


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


class EndOfDocument:
    """What GPTDataset asks of a tokenizer: the ids it pads and ends documents with."""

    def __init__(self, eod, vocab_size):
        self.eod = eod
        self.pad = eod
        self.vocab_size = vocab_size
        # Megatron writes it into its cache descriptions.
        self.unique_identifiers = {"class": "EndOfDocument", "eod": eod}


def main():
    data_args, split, seq_len, samples = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import get_blend_from_list

    # As `--data-path` takes them: weight, prefix, weight, prefix, ...
    with open(data_args) as file:
        absolute = json.load(file)[split]
    if not all(os.path.isabs(prefix) for prefix in absolute[1::2]):
        fail(f"the prefixes are not absolute: {absolute[1::2]}")
    prefixes = absolute[1::2]
    weights = [float(weight) for weight in absolute[0::2]]
    if abs(sum(weights) - 1.0) > 1e-9:
        fail(f"the blend's weights sum to {sum(weights)}, not 1")

    # Every token of every component's documents, to find each sample in.
    component_of = {}
    tokens_of = {}
    for prefix in prefixes:
        component = os.path.basename(prefix).split("-")[0]
        dataset = IndexedDataset(prefix)
        ids = numpy.concatenate([dataset[index] for index in range(len(dataset))]) if len(dataset) else numpy.array([])
        tokens_of.setdefault(component, set()).update(int(id) for id in ids)
        component_of[prefix] = component
    shared = set.intersection(*tokens_of.values()) if len(tokens_of) > 1 else set()

    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=seq_len,
        blend=get_blend_from_list(absolute),
        split="100,0,0",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=EndOfDocument(eod=50256, vocab_size=50257),
        path_to_cache=None,
        mid_level_dataset_surplus=0.5,
    )
    built = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()
    train = built[0]
    if train is None or len(train) < samples:
        fail(f"the blended dataset has {0 if train is None else len(train)} samples, {samples} asked for")
    drawn = {}
    for index in range(samples):
        sample = train[index]
        tokens = set(int(id) for id in numpy.asarray(sample["tokens"]).tolist()) - shared
        owners = [component for component, ids in tokens_of.items() if tokens and tokens <= ids]
        if len(owners) != 1:
            fail(f"sample {index} is not a run of one component's tokens: {sorted(tokens)[:20]}")
        drawn[owners[0]] = drawn.get(owners[0], 0) + 1
    by_component = {}
    for prefix, weight in zip(prefixes, weights):
        component = component_of[prefix]
        by_component[component] = by_component.get(component, 0.0) + weight
    print(json.dumps({"samples": samples, "drawn": drawn, "weights": by_component}))


main()
