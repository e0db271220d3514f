"""
Tokenize OpenWebText with the GPT-2 BPE and write train.bin / val.bin (uint16 token ids),
the memmap format train.py reads. Needs ~60GB of disk and `pip install datasets tiktoken`.
"""

import os

import numpy as np
import tiktoken
from datasets import load_dataset
from tqdm import tqdm

NUM_PROC = 16
OUT_DIR = os.path.dirname(os.path.abspath(__file__))


def main():
    enc = tiktoken.get_encoding("gpt2")
    ds = load_dataset("openwebtext", num_proc=NUM_PROC)
    split = ds["train"].train_test_split(test_size=0.0005, seed=2357, shuffle=True)
    split["val"] = split.pop("test")

    def process(example):
        ids = enc.encode_ordinary(example["text"])
        ids.append(enc.eot_token)
        return {"ids": ids, "len": len(ids)}

    tokenized = split.map(process, remove_columns=["text"], desc="tokenizing", num_proc=NUM_PROC)
    for name, dset in tokenized.items():
        total = np.sum(dset["len"], dtype=np.uint64)
        arr = np.memmap(os.path.join(OUT_DIR, f"{name}.bin"), dtype=np.uint16, mode="w+", shape=(total,))
        idx = 0
        for shard in tqdm(range(1024), desc=f"writing {name}.bin"):
            batch = dset.shard(num_shards=1024, index=shard, contiguous=True).with_format("numpy")
            chunk = np.concatenate(batch["ids"])
            arr[idx:idx + len(chunk)] = chunk
            idx += len(chunk)
        arr.flush()


if __name__ == "__main__":
    main()
