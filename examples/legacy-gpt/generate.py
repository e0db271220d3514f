"""
Sample from a trained legacy-gpt checkpoint with a KV cache.

    python generate.py --ckpt out/ckpt.pt --prompt "The meaning of life is" --max-new-tokens 200
"""

import argparse

import torch

from kernels import scaled_softmax
from model import GPT, GPTConfig


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """Prefill the prompt once, then decode one token at a time against the KV cache."""
    model.eval()
    B, T = idx.shape
    cache = model.new_kv_cache(B, max_len=T + max_new_tokens)
    logits, _ = model(idx, kv_cache=cache, start_pos=0)
    pos = T
    out = [idx]
    for _ in range(max_new_tokens):
        logits = logits[:, -1, :]
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits = logits.masked_fill(logits < v[:, [-1]], float("-inf"))
        if temperature == 0.0:
            next_tok = logits.argmax(dim=-1, keepdim=True)
        else:
            probs = scaled_softmax(logits, 1.0 / temperature)
            next_tok = torch.multinomial(probs, num_samples=1, generator=generator)
        out.append(next_tok)
        logits, _ = model(next_tok, kv_cache=cache, start_pos=pos)
        pos += 1
    return torch.cat(out, dim=1)


def load_model(ckpt_path, device="cuda"):
    ckpt = torch.load(ckpt_path, map_location="cpu")
    model = GPT(GPTConfig(**ckpt["config"]))
    model.load_state_dict(ckpt["model"])
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return model.to(device=device, dtype=dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=200)
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args()

    import tiktoken  # only needed for the CLI

    enc = tiktoken.get_encoding("gpt2")
    torch.manual_seed(args.seed)
    model = load_model(args.ckpt)
    idx = torch.tensor([enc.encode(args.prompt)], dtype=torch.long, device="cuda")
    y = generate(model, idx, args.max_new_tokens, args.temperature, args.top_k)
    print(enc.decode(y[0].tolist()))


if __name__ == "__main__":
    main()
