#%% CELL imports
from __future__ import annotations
import copy, hashlib, json, math, os, random, time
from dataclasses import dataclass, field, asdict, replace
from pathlib import Path
import torch
import torch.nn as nn
import torch.nn.functional as F
from fastcore.basics import patch
from tqdm.auto import tqdm
from minillm.model import ModelConfig, Transformer, Block, rope_tables
from minillm.weights import LLM, cache_dir
from minillm.loop import encode_prompt, Generation
from minillm.kvcache import KVCache
from minillm.speculative import expected_tokens, expected_speedup, step_cost, precision_copy, prompt_lookup

#%% CELL features
def head_weight(model:Transformer) -> torch.Tensor:
    "The target's output head `(V, C)` (the token-embedding matrix when they are tied)."
    return model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight

def target_features(llm:LLM, ids:list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    "One pass of the frozen target over `ids`: its final hidden states `(T, C)` float32 (after the last norm: what the head reads) and its greedy next token at each position `(T,)`."
    m = llm.model
    with torch.inference_mode():
        h = m.embed_tokens(torch.tensor([ids], device=llm.device))           # (1, T, C)
        cos, sin = rope_tables(torch.arange(len(ids), device=llm.device)[None], m.cfg.head_dim, m.cfg.rope_theta, h.dtype)
        for layer in m.layers: h = layer(h, cos, sin)
        h = m.norm(h)[0]                                                    # (T, C)
        nxt = F.linear(h, head_weight(m)).argmax(-1)                        # (T,)
    return h.float().cpu(), nxt.cpu()

def weights_key(llm:LLM) -> str:
    "A fingerprint of `llm`'s shape and weights (a strided sample of every tensor, rounded to bfloat16 so that float32 and bfloat16 copies of one model share it)."
    h = hashlib.sha256(json.dumps(asdict(llm.config), sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, t in sorted(llm.model.state_dict().items()):
            flat = t.detach().reshape(-1)
            h.update(f"{name}{tuple(t.shape)}".encode())
            h.update(flat[::max(1, flat.numel() // 4096)].to(torch.bfloat16).float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]

#%% CELL data
TOPICS = ['deserts', 'a city at night', 'learning to cook', 'friendship', 'the planet Mars', 'a rainy afternoon',
          'bicycles', 'saving money', 'a lighthouse keeper', 'volcanoes', 'healthy sleep', 'chess',
          'the history of paper', 'a lost cat', 'winter mornings', 'bees', 'public libraries', 'time management',
          'a dragon who is afraid of fire', 'photosynthesis', 'trains', 'music practice', 'recycling', 'a mountain village']
TASKS = ['Write a short poem about {}.', 'Explain {} to a ten-year-old.', 'Give me three tips about {}.',
         'Write the opening of a story about {}.', 'What are the pros and cons of {}?', 'Describe {} in a few sentences.']

def train_prompts(n:int|None=None) -> list[list[dict]]:
    "Chat prompts for self-distillation: every task template applied to every topic (`n`: the first n of them, in a fixed shuffled order)."
    ps = [[{"role": "user", "content": t.format(s)}] for t in TASKS for s in TOPICS]
    random.Random(0).shuffle(ps)
    return ps if n is None else ps[:n]

def pydoc_text(max_chars:int|None=None) -> str:
    "CPython's own help texts (`pydoc_data.topics`, part of the standard library): English prose with code, available offline."
    from pydoc_data.topics import topics
    s = '\n\n'.join(topics[k] for k in sorted(topics))
    return s if max_chars is None else s[:max_chars]

@dataclass
class DistillData:
    "Self-distillation data: token windows with the frozen target's final hidden states and greedy next tokens."
    ids: list[torch.Tensor]     # each (T,) token ids of one window
    feats: list[torch.Tensor]   # each (T, C) the target's hidden state at every position (float16 on disk)
    nxt: list[torch.Tensor]     # each (T,) the target's greedy next token at every position
    source: list[str]           # where each window comes from: "text" or "chat"
    starts: list[int]           # first position of the target's own answer in a chat window (0 for text)
    key: str                    # `weights_key` of the target
    @property
    def n_tokens(self) -> int: return sum(len(i) for i in self.ids)
    def __repr__(self):
        by = {s: sum(len(i) for i, t in zip(self.ids, self.source) if t == s) for s in sorted(set(self.source))}
        return f"DistillData({len(self.ids)} windows, {self.n_tokens} tokens: {by})"

def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, int) or v < lo: raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

def answer_greedy(llm:LLM, prompts:list, max_new_tokens:int, batch_size:int=16) -> list[list[int]]:
    "The target's greedy answers to `prompts`, `batch_size` at a time (rows padded on the right, one cache length per row), each cut after its first stop token: prompt ids + answer ids."
    stop, m, out = llm.tokenizer.stop_token_ids, llm.model, []
    for b in range(0, len(prompts), batch_size):
        ids = [encode_prompt(llm, p, max_new_tokens) for p in prompts[b:b + batch_size]]
        B, lens = len(ids), torch.tensor([len(i) for i in ids])
        x = torch.zeros(B, int(lens.max()), dtype=torch.long)
        for r, i in enumerate(ids): x[r, :len(i)] = torch.tensor(i)
        cache = KVCache.for_model(m, B, int(lens.max()) + max_new_tokens)
        with torch.inference_mode():
            logits = m(x.to(llm.device), cache=cache)                        # (B, T, V); padding sits after each row's prompt
            cache.set_lengths(lens)                                          # forget the padding
            nxt = logits[torch.arange(B), lens - 1].argmax(-1)               # (B,)
            new = [nxt]
            for _ in range(max_new_tokens - 1):
                nxt = m(nxt[:, None], cache=cache, last_only=True)[:, -1].argmax(-1)
                new.append(nxt)
        new = torch.stack(new, 1).tolist()
        for i, a in zip(ids, new):
            cut = next((j + 1 for j, t in enumerate(a) if t in stop), len(a))
            out.append(i + a[:cut])
    return out

def distill_data(llm:LLM, texts=None, prompts=None, *, window:int=256, max_text_tokens:int=8_000, answer_tokens:int=96,
                 cache:bool=True, progress:bool=True) -> DistillData:
    "Run the frozen target over `texts` (strings or token-id lists; default: `pydoc_text()`) cut into `window`-token pieces, and over `prompts` answered by the target itself (chat messages; default: `train_prompts()`), keeping its hidden states and greedy next tokens. Cached by target and arguments."
    _check_int('window', window, 2); _check_int('max_text_tokens', max_text_tokens, 0); _check_int('answer_tokens', answer_tokens, 1)
    texts = [pydoc_text(60 * max_text_tokens)] if texts is None else list(texts)
    prompts = train_prompts() if prompts is None else list(prompts)
    key = weights_key(llm)
    spec = hashlib.sha256(json.dumps([key, texts, prompts, window, max_text_tokens, answer_tokens], default=str).encode()).hexdigest()[:16]
    path = cache_dir() / 'drafts' / f"data-{spec}.pt"
    if cache and path.exists():
        d = torch.load(path)
        return DistillData(d['ids'], [f.float() for f in d['feats']], d['nxt'], d['source'], d['starts'], d['key'])
    pieces = []                                                            # (ids, source)
    budget = max_text_tokens
    for t in texts:
        ids = t if isinstance(t, (list, tuple)) else llm.tokenizer.encode(t)
        for s in range(0, len(ids) - 1, window):
            w = list(ids[s:s + window])[:budget]
            if len(w) >= 2: pieces.append((w, 'text', 0)); budget -= len(w)
    for b in tqdm(range(0, len(prompts), 16), desc='target answers', disable=not progress or not prompts, leave=False):
        for p, full in zip(prompts[b:b + 16], answer_greedy(llm, prompts[b:b + 16], answer_tokens)):
            pieces.append((full, 'chat', len(encode_prompt(llm, p, answer_tokens))))
    out = DistillData([], [], [], [], [], key)
    for ids, src, st in tqdm(pieces, desc='target features', disable=not progress, leave=False):
        f, n = target_features(llm, ids)
        out.ids.append(torch.tensor(ids)); out.feats.append(f); out.nxt.append(n); out.source.append(src); out.starts.append(st)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(dict(ids=out.ids, feats=[f.half() for f in out.feats], nxt=out.nxt, source=out.source, starts=out.starts, key=key), path)
    return out

def frequent_tokens(data:DistillData, K:int) -> torch.Tensor:
    "The `K` tokens the target predicts most often in `data` (its own outputs), sorted by id."
    V = int(max(int(n.max()) for n in data.nxt)) + 1
    counts = torch.bincount(torch.cat(data.nxt), minlength=V).float()
    if K > counts.numel(): counts = torch.cat([counts, torch.zeros(K - counts.numel())])
    return counts.topk(K).indices.sort().values

#%% CELL modules
class MedusaHeads(nn.Module):
    "Medusa-1 heads: head i maps the target's last hidden state h to h + SiLU(W_i h + b_i), read by the target's own output head; head i guesses the token i+1 places after the one the target predicts."
    def __init__(self, dim:int, num_heads:int=4):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(dim, dim) for _ in range(num_heads)])
        for l in self.lins: nn.init.zeros_(l.weight); nn.init.zeros_(l.bias)   # each head starts as the target's head
    @property
    def num_heads(self): return len(self.lins)
    def forward(self, h:torch.Tensor, k:int|None=None) -> torch.Tensor:   # h: (..., C) -> (..., k, C)
        return torch.stack([h + F.silu(l(h)) for l in self.lins[:k]], -2)

class EagleDraft(nn.Module):
    "An EAGLE-style draft: one decoder block over [embedding of token t+1, target feature at t], predicting the target's feature at t+1, read by the target's own head."
    def __init__(self, cfg:ModelConfig):
        super().__init__()
        self.cfg = replace(cfg, n_layers=1)
        C = cfg.dim
        self.fc = nn.Linear(2 * C, C, bias=False)
        with torch.no_grad(): self.fc.weight[:, C:].copy_(torch.eye(C)); self.fc.weight[:, :C].mul_(0.1)  # start near "feature in, feature out"
        self.block = Block(self.cfg, 0)
    @property
    def dtype(self): return self.fc.weight.dtype
    @property
    def device(self): return self.fc.weight.device
    def forward(self, feats:torch.Tensor, emb:torch.Tensor, pos:torch.Tensor, cache=None) -> torch.Tensor:
        "feats, emb: (B, T, C); pos: (B, T) positions; returns predicted next features (B, T, C)."
        x = self.fc(torch.cat([emb, feats], -1))
        cos, sin = rope_tables(pos, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        x = self.block(x, cos, sin, cache)
        if cache is not None: cache.advance(x.shape[1])
        return x

#%% CELL draft
KINDS = ('medusa', 'eagle')

class TrainedDraft:
    "A draft trained on one target's hidden states: Medusa heads or an EAGLE-style layer, with the vocabulary its head reads (`None`: all of it). Use as `llm.generate(prompt, draft=d)`."
    def __init__(self, kind:str, module:nn.Module, vocab:torch.Tensor|None, target_key:str, info:dict|None=None, lookup:bool=False):
        if kind not in KINDS: raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.kind, self.module, self.vocab, self.target_key, self.info = kind, module.eval(), vocab, target_key, info or {}
        self.lookup, self._casts = lookup, {}

    def check_target(self, llm:LLM):
        "Raise a ValueError unless `llm` is the target this draft was trained on (same shape and weights, any dtype)."
        if not isinstance(llm, LLM): raise ValueError(f"need the target LLM, got {type(llm).__name__}")
        key = weights_key(llm)
        if key != self.target_key:
            raise ValueError(f"this {self.kind} draft was trained on a target with weights key {self.target_key}, but this model's key is {key}: "
                             f"a draft reads the target's hidden states and only fits the model it was trained on; train one with train_draft(llm, ...)")

    def with_vocab(self, vocab:torch.Tensor|None) -> 'TrainedDraft':
        "The same draft reading the output head over other tokens (`None`: the full vocabulary)."
        out = TrainedDraft(self.kind, self.module, vocab, self.target_key, self.info, self.lookup)
        out._casts = self._casts if vocab is self.vocab else {}
        return out

    def with_lookup(self, on:bool=True) -> 'TrainedDraft':
        "The same draft, trying prompt lookup first (a match of 2 or more tokens in the text so far) and drafting itself only when lookup finds nothing."
        out = TrainedDraft(self.kind, self.module, self.vocab, self.target_key, self.info, on)
        out._casts = self._casts
        return out

    def drafter(self, llm:LLM) -> 'SelfDrafter':
        "A drafter for `llm` (chapter 06's interface: `start`, `propose`); use it in a `with` block so its hook on the target is removed."
        self.check_target(llm)
        return SelfDrafter(self, llm)

    def module_for(self, dtype, device) -> nn.Module:
        "The draft's weights in `dtype` on `device` (cast once and kept)."
        k = (dtype, str(device))
        if k not in self._casts: self._casts[k] = copy.deepcopy(self.module).to(device=device, dtype=dtype).eval().requires_grad_(False)
        return self._casts[k]

    def save(self, path):
        "Write the draft's weights, vocabulary, target key and training report to `path` (the target's own weights are not stored)."
        path = Path(path); path.parent.mkdir(parents=True, exist_ok=True)
        cfg = asdict(self.module.cfg) if self.kind == 'eagle' else dict(dim=self.module.lins[0].in_features, num_heads=self.module.num_heads)
        torch.save(dict(format='minillm-draft-1', kind=self.kind, config=cfg, state=self.module.state_dict(), vocab=self.vocab,
                        target_key=self.target_key, info=self.info), path)

    @classmethod
    def load(cls, path, llm:LLM|None=None) -> 'TrainedDraft':
        "Read a draft written by `save`; with `llm`, refuse (ValueError) a draft trained for another target."
        path = Path(path)
        if not path.exists(): raise ValueError(f"no draft file at {path}")
        try: d = torch.load(path, weights_only=True)
        except Exception as e: raise ValueError(f"{path} is not a minillm draft file: {e}") from e
        if not isinstance(d, dict) or d.get('format') != 'minillm-draft-1': raise ValueError(f"{path} is not a minillm draft file")
        m = EagleDraft(ModelConfig(**d['config'])) if d['kind'] == 'eagle' else MedusaHeads(**d['config'])
        m.load_state_dict(d['state'])
        out = cls(d['kind'], m, d['vocab'], d['target_key'], d['info'])
        if llm is not None: out.check_target(llm)
        return out

    def __repr__(self):
        what = f"{self.module.num_heads} heads" if self.kind == 'medusa' else "1 layer"
        voc = 'full vocabulary' if self.vocab is None else f"{len(self.vocab)} tokens"
        n = sum(p.numel() for p in self.module.parameters())
        return f"TrainedDraft({self.kind}, {what}, {n / 1e6:.2f}M params, head over {voc}{', prompt lookup first' if self.lookup else ''}, target {self.target_key})"

def load_draft(path, llm:LLM) -> TrainedDraft:
    "Load a saved draft for the target `llm`; a draft trained on another model raises a ValueError."
    return TrainedDraft.load(path, llm)

#%% CELL drafter
class SelfDrafter:
    "Chapter 06's drafter interface for a trained draft: a forward hook on the target's last block records its hidden states during verification, and `propose` drafts from them."
    def __init__(self, draft:TrainedDraft, llm:LLM):
        m = llm.model
        if not isinstance(m, Transformer): raise ValueError(f"a trained draft needs minillm's eager Transformer as target, got {type(m).__name__}")
        self.draft, self.llm, self.kind = draft, llm, draft.kind
        self.net = draft.module_for(m.dtype, m.device)
        W = head_weight(m)
        self.vocab = None if draft.vocab is None else draft.vocab.to(m.device)
        self.W = W if self.vocab is None else W[self.vocab]                  # (K, C) rows of the target's head
        self.handle, self.rounds, self._last = None, [], None

    def _hook(self, module, args, out):                                    # the last block's output (1, T, C), before the final norm
        cache = args[3] if len(args) > 3 else None
        if out.shape[0] != 1 or self.feats is None: return
        s = int(cache.lengths[0]) if cache is not None else 0              # position of the pass's first token
        self.feats[s:s + out.shape[1]] = self.llm.model.norm(out[0])

    def __enter__(self):
        if self.handle is None: self.handle = self.llm.model.layers[-1].register_forward_hook(self._hook)
        return self
    def __exit__(self, *exc): self.close()
    def close(self):
        "Remove the hook from the target."
        if self.handle is not None: self.handle.remove(); self.handle = None

    def start(self, prompt_ids:list[int], max_len:int):
        self.__enter__()
        m = self.llm.model
        with torch.inference_mode():
            self.feats = torch.zeros(max_len, m.cfg.dim, dtype=m.dtype, device=m.device)   # (S, C) target features by position
        if self.kind == 'eagle':
            c = self.net.cfg
            self.cache, self.n_fed = KVCache(1, 1, c.n_kv_heads, c.head_dim, max_len, dtype=m.dtype, device=m.device), 0
        self._last = None

    def _full(self, z:torch.Tensor) -> torch.Tensor:                       # (R, K) head logits -> (R, V) float32, -inf off the subset
        if self.vocab is None: return z.float()
        out = torch.full((z.shape[0], self.llm.config.vocab_size), float('-inf'), device=z.device)
        return out.index_copy_(1, self.vocab, z.float())

    def _record(self, tokens):
        "Count how many of the previous round's draft tokens the target kept (for per-round statistics)."
        if self._last is None: return
        L, d = self._last
        got = tokens[L:L + len(d)]
        n = 0
        while n < len(got) and got[n] == d[n]: n += 1
        self.rounds.append((len(d), n))
        self._last = None

    def propose(self, tokens:list[int], k:int, probs):
        "Up to `k` draft tokens after `tokens` and their draft distributions (None when greedy)."
        self._record(tokens)
        L, j = len(tokens), len(tokens) - 2                                # features are known up to position L-2
        if j < 0 or k < 1: return [], None
        if self.draft.lookup and (look := prompt_lookup(tokens, k, 3, 2)):
            self._last = (L, look)
            return look, None                                              # deterministic: q is one-hot
        out, qs, hist = [], [], list(tokens)
        def pick(z):
            t, q = probs(self._full(z), hist)
            out.append(t); hist.append(t)
            if q is not None: qs.append(q)
            return t
        with torch.inference_mode():
            if self.kind == 'medusa':
                z = F.linear(self.net(self.feats[j], min(k, self.net.num_heads)), self.W)   # (k, K): all heads at once
                for i in range(z.shape[0]): pick(z[i:i + 1])
            else:
                emb, n0, dev = self.llm.model.embed_tokens, min(self.n_fed, j), self.feats.device
                self.cache.set_lengths(n0)                                   # forget last round's own guesses
                pos = torch.arange(n0, j + 1, device=dev)[None]
                g = self.net(self.feats[n0:j + 1][None], emb(torch.tensor([tokens[n0 + 1:L]], device=dev)), pos, self.cache)[:, -1:]
                self.n_fed = j + 1
                for i in range(k):
                    t = pick(F.linear(g[0], self.W))                         # (1, K)
                    if i < k - 1: g = self.net(g, emb(torch.tensor([[t]], device=dev)), torch.tensor([[j + 1 + i]], device=dev), self.cache)
        self._last = (L, out)
        return out, (torch.cat(qs) if qs else None)

    def finish(self, tokens:list[int]):
        "Record the last round, given the final token list."
        self._record(tokens)

#%% CELL train
def _split(data:DistillData, frac:float=0.1):
    "Hold out every tenth chat window (the target's own answers) for validation."
    chat = [i for i, s in enumerate(data.source) if s == 'chat']
    val = set(chat[::max(1, round(1 / frac))]) if len(chat) >= 2 else set(range(0, len(data.ids), 10))
    return [i for i in range(len(data.ids)) if i not in val], sorted(val)

def _labels(data:DistillData, idx, num_heads:int, vmap:torch.Tensor):
    "Features (N, C) and labels (N, num_heads): head i at position t is trained on the target's greedy token at position t+1+i; -100 off the window or off the head's vocabulary."
    F_, Y = [], []
    for w in idx:
        f, n = data.feats[w], vmap[data.nxt[w]]                             # n[t]: target's next token after t, as a head index
        T = len(n)
        y = torch.full((T, num_heads), -100, dtype=torch.long)
        for i in range(num_heads):
            if T > i + 1: y[:T - i - 1, i] = n[i + 1:]
        F_.append(f); Y.append(y)
    return torch.cat(F_), torch.cat(Y)

def _medusa_step(net, W, Fb, Yb, weights):
    z = F.linear(net(Fb), W)                                               # (B, H, K)
    losses = [F.cross_entropy(z[:, i], Yb[:, i], ignore_index=-100) for i in range(z.shape[1])]
    return sum(w * l for w, l in zip(weights, losses))

def _eagle_batch(data, idx, B, T, gen):
    "B random chunks of T+1 positions from the windows `idx`: features, tokens, target next tokens."
    f, x, y = [], [], []
    for _ in range(B):
        w = idx[int(torch.randint(len(idx), (1,), generator=gen))]
        L = len(data.ids[w])
        s = int(torch.randint(max(1, L - T - 1), (1,), generator=gen)) if L > T + 1 else 0
        e = min(L, s + T + 1)
        pad = T + 1 - (e - s)
        f.append(F.pad(data.feats[w][s:e], (0, 0, 0, pad))); x.append(F.pad(data.ids[w][s:e], (0, pad)))
        y.append(F.pad(data.nxt[w][s:e], (0, pad), value=-1))
    return torch.stack(f), torch.stack(x), torch.stack(y)                 # (B, T+1, C), (B, T+1), (B, T+1)

def _eagle_loss(net, emb, W, vmap, f, x, y, unroll:int=2, reg:float=1.0):
    "Input (feature at t, token t+1) -> feature at t+1; loss: the head's cross-entropy on the target's next token plus a smooth-L1 pull toward the true feature; `unroll` passes, each fed the previous pass's own features."
    B, T1, C = f.shape
    T = T1 - 1
    pos = torch.arange(T)[None].expand(B, T)
    e = emb(x[:, 1:])                                                      # (B, T, C) embedding of token t+1
    lab = torch.where(y[:, 1:] >= 0, vmap[y[:, 1:].clamp_min(0)], -100)    # target's next token after t+1, head index
    inp, total = f[:, :-1], 0.0
    for u in range(unroll):
        g = net(inp, e, pos)                                               # (B, T, C)
        total = total + F.cross_entropy(F.linear(g, W).flatten(0, 1), lab.flatten(), ignore_index=-100) \
                      + reg * F.smooth_l1_loss(g[y[:, 1:] >= 0], f[:, 1:][y[:, 1:] >= 0])
        inp = torch.cat([f[:, :1], g[:, :-1]], 1)                          # next pass: its own guesses as inputs
    return total / unroll

def train_draft(llm:LLM, kind:str='medusa', max_minutes:float=10.0, *, data:DistillData|None=None, num_heads:int=4,
                vocab_size:int|None=8192, lr:float=1e-3, batch_size:int=256, seq_len:int=64, max_steps:int|None=None,
                seed:int=0, cache:bool=True, progress:bool=True) -> TrainedDraft:
    "Train a draft for `llm` from its own hidden states: Medusa-1 heads (`kind=\"medusa\"`) or an EAGLE-style layer (`\"eagle\"`), for at most `max_minutes` (or `max_steps`). The target stays frozen; the draft reads its output head over the `vocab_size` tokens it predicts most often (`None`: all). Cached by target, data and arguments."
    if kind not in KINDS: raise ValueError(f"kind must be \"medusa\" or \"eagle\", got {kind!r}")
    if isinstance(max_minutes, bool) or not isinstance(max_minutes, (int, float)) or not max_minutes > 0:
        raise ValueError(f"max_minutes must be a number > 0, got {max_minutes!r}")
    _check_int('num_heads', num_heads, 1); _check_int('batch_size', batch_size, 1); _check_int('seq_len', seq_len, 2)
    if max_steps is not None: _check_int('max_steps', max_steps, 1)
    V = llm.config.vocab_size
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or not 1 <= vocab_size <= V):
        raise ValueError(f"vocab_size must be None (the full vocabulary) or an integer in 1..{V}, got {vocab_size!r}")
    if not lr > 0: raise ValueError(f"lr must be > 0, got {lr!r}")
    data = distill_data(llm, progress=progress) if data is None else data
    key = weights_key(llm)
    if data.key != key: raise ValueError("data was computed with another target model: build it with distill_data(llm, ...) for this one")
    spec = json.dumps(dict(kind=kind, m=max_minutes, data=[data.n_tokens, float(sum(f[:, 0].sum() for f in data.feats))], h=num_heads,
                           v=vocab_size, lr=lr, b=batch_size, t=seq_len, s=max_steps, seed=seed))
    path = cache_dir() / 'drafts' / f"{kind}-{key}-{hashlib.sha256(spec.encode()).hexdigest()[:12]}.pt"
    if cache and path.exists(): return TrainedDraft.load(path, llm)

    torch.manual_seed(seed); gen = torch.Generator().manual_seed(seed)
    m = llm.model
    vocab = None if vocab_size is None else frequent_tokens(data, vocab_size)
    vmap = torch.arange(V) if vocab is None else torch.full((V,), -100, dtype=torch.long).index_copy_(0, vocab, torch.arange(len(vocab)))
    W = head_weight(m).detach().float().cpu()
    W = W if vocab is None else W[vocab]                                   # (K, C) frozen
    emb = nn.Embedding.from_pretrained(m.embed_tokens.weight.detach().float().cpu(), freeze=True)
    tr, va = _split(data)
    net = MedusaHeads(m.cfg.dim, num_heads) if kind == 'medusa' else EagleDraft(m.cfg)
    net.train()
    if kind == 'medusa':
        Ftr, Ytr = _labels(data, tr, num_heads, vmap)
        weights = [0.8 ** i for i in range(num_heads)]
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.0)
    losses, t0, step = [], time.perf_counter(), 0
    budget = 60 * max_minutes
    bar = tqdm(total=round(budget), desc=f"train {kind}", unit='s', disable=not progress, leave=False)
    while True:
        el = time.perf_counter() - t0
        if el >= budget or (max_steps is not None and step >= max_steps): break
        if kind == 'medusa':
            ix = torch.randint(len(Ftr), (batch_size,), generator=gen)
            loss = _medusa_step(net, W, Ftr[ix], Ytr[ix], weights)
        else:
            f, x, y = _eagle_batch(data, tr, max(1, batch_size // seq_len), seq_len, gen)
            loss = _eagle_loss(net, emb, W, vmap, f, x, y)
        lr_now = lr * min(1.0, (step + 1) / 20) * (0.5 + 0.5 * math.cos(math.pi * min(1.0, el / budget)))   # warm-up, cosine over the time budget
        for g_ in opt.param_groups: g_['lr'] = lr_now
        opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0); opt.step()
        losses.append(float(loss)); step += 1
        bar.n = min(round(time.perf_counter() - t0), bar.total); bar.set_postfix(loss=f"{losses[-1]:.3f}", step=step, refresh=False); bar.update(0)
    bar.close()
    info = dict(kind=kind, minutes=(time.perf_counter() - t0) / 60, steps=step, losses=losses, tokens=data.n_tokens,
                train_windows=len(tr), val_windows=len(va), num_heads=num_heads, vocab_size=vocab_size, batch_size=batch_size)
    d = TrainedDraft(kind, net.eval().requires_grad_(False), vocab, key, info)
    d.info['val'] = draft_accuracy(d, llm, data, va)
    if cache: d.save(path)
    return d

#%% CELL accuracy
def draft_accuracy(draft:TrainedDraft, llm:LLM, data:DistillData, idx=None, k:int=4) -> dict:
    "Chains of `k` greedy guesses from every position of the target's answers in windows `idx` (default: all), compared with the target's own greedy tokens: top-1 accuracy of guess i, and how many leading guesses are right (the tokens a greedy round accepts, not counting the target's bonus token)."
    idx = range(len(data.ids)) if idx is None else idx
    m, dev = llm.model, 'cpu'
    net = draft.module_for(torch.float32, dev)
    W = head_weight(m).detach().float().cpu()
    vocab = draft.vocab
    Wk = W if vocab is None else W[vocab]
    emb = m.embed_tokens.weight.detach().float().cpu()
    to_id = (lambda z: z.argmax(-1)) if vocab is None else (lambda z: vocab[z.argmax(-1)])
    hits, n_acc = torch.zeros(k), []
    with torch.inference_mode():
        for w in idx:
            f, x, y, s0 = data.feats[w], data.ids[w], data.nxt[w], data.starts[w]
            T = len(x)
            ts = list(range(max(s0 - 2, 0), T - k))                    # chains whose k labels all lie in the window
            if not ts: continue
            if draft.kind == 'medusa':
                guess = to_id(F.linear(net(f[ts], k), Wk))                  # (n, k)
            else:
                cache = KVCache(1, 1, net.cfg.n_kv_heads, net.cfg.head_dim, T + k, dtype=torch.float32)
                out = net(f[None, :T - 1], emb[x[1:]][None], torch.arange(T - 1)[None], cache)[0]   # (T-1, C) step 1 at every t
                guess = torch.zeros(len(ts), k, dtype=torch.long)
                for r, t in enumerate(ts):
                    g = out[t:t + 1][None]
                    cache.set_lengths(t + 1)
                    for i in range(k):
                        tok = int(to_id(F.linear(g[0, 0], Wk)))
                        guess[r, i] = tok
                        if i < k - 1: g = net(g, emb[[tok]][None], torch.tensor([[t + 1 + i]]), cache)
            labels = torch.stack([y[torch.tensor(ts) + 1 + i] for i in range(k)], 1)   # (n, k) target greedy tokens
            ok = guess == labels
            hits += ok.float().sum(0)
            n_acc.append(ok.long().cumprod(1).sum(1))
    n_acc = torch.cat(n_acc)
    return dict(k=k, positions=len(n_acc), accuracy=(hits / len(n_acc)).tolist(),
                accepted_hist=torch.bincount(n_acc, minlength=k + 1).tolist(), mean_accepted=n_acc.float().mean().item())

#%% CELL generate
_untrained_generate = getattr(LLM.generate, 'untrained', LLM.generate)   # the methods before this chapter (also after a reload)
_untrained_stream = getattr(LLM.stream, 'untrained', LLM.stream)

@patch
def generate(self:LLM, prompt, max_new_tokens:int|None=None, params=None, *, use_cache:bool=True,
             draft=None, num_draft_tokens:int|None=None, max_ngram:int=3, **kwargs):
    "Generate as before; `draft` may also be a `TrainedDraft` for this model (the result then carries `draft_rounds`: (drafted, accepted) per target pass)."
    if not isinstance(draft, TrainedDraft):
        return _untrained_generate(self, prompt, max_new_tokens, params, use_cache=use_cache, draft=draft,
                                   num_draft_tokens=num_draft_tokens, max_ngram=max_ngram, **kwargs)
    if isinstance(prompt, list) and prompt and not all(isinstance(p, (dict, int)) for p in prompt):
        raise ValueError("a trained draft drafts for one sequence: pass one prompt, not a list of prompts")
    with draft.drafter(self) as d:
        out = _untrained_generate(self, prompt, max_new_tokens, params, use_cache=use_cache, draft=d,
                                  num_draft_tokens=num_draft_tokens, max_ngram=max_ngram, **kwargs)
    d.finish(out.prompt_ids + out.token_ids)
    out.draft_rounds = d.rounds + [(0, 0)] * (out.target_passes - len(d.rounds))   # passes with nothing drafted (k = 0 at the end)
    return out

@patch
def stream(self:LLM, prompt, max_new_tokens:int|None=None, params=None, *, use_cache:bool=True,
           draft=None, num_draft_tokens:int|None=None, max_ngram:int=3, **kwargs):
    "Stream as before; `draft` may also be a `TrainedDraft` for this model."
    if not isinstance(draft, TrainedDraft):
        return (yield from _untrained_stream(self, prompt, max_new_tokens, params, use_cache=use_cache, draft=draft,
                                             num_draft_tokens=num_draft_tokens, max_ngram=max_ngram, **kwargs))
    with draft.drafter(self) as d:
        return (yield from _untrained_stream(self, prompt, max_new_tokens, params, use_cache=use_cache, draft=d,
                                             num_draft_tokens=num_draft_tokens, max_ngram=max_ngram, **kwargs))

for _m, _prev in ((LLM.generate, _untrained_generate), (LLM.stream, _untrained_stream)):
    _m.untrained, _m.plain = _prev, getattr(_prev, 'plain', _prev)

#%% CELL cost
def untrained_draft(llm:LLM, kind:str, vocab_size:int|None=None, num_heads:int=4) -> TrainedDraft:
    "A randomly initialised draft of `kind` for `llm` with a head over `vocab_size` tokens (the first ids; `None`: all): what a draft costs does not depend on its training."
    if kind not in KINDS: raise ValueError(f"kind must be \"medusa\" or \"eagle\", got {kind!r}")
    net = MedusaHeads(llm.config.dim, num_heads) if kind == 'medusa' else EagleDraft(llm.config)
    if kind == 'medusa':
        for l in net.lins: nn.init.normal_(l.weight, std=0.02)
    vocab = None if vocab_size is None else torch.arange(vocab_size)
    return TrainedDraft(kind, net, vocab, weights_key(llm))

def draft_cost(llm:LLM, draft:TrainedDraft, k:int=4, context:int=64, reps:int=15) -> float:
    "Median seconds of one greedy drafting round of `k` tokens on `llm` (after a `context`-token prompt, one new token accepted per round)."
    _check_int('k', k, 1)
    g = torch.Generator().manual_seed(0)
    toks = torch.randint(0, llm.config.vocab_size, (context + 2 * reps + 4,), generator=g).tolist()
    pick = lambda logits, hist: (int(logits.argmax(-1)), None)
    times = []
    with draft.drafter(llm) as d:
        d.start(toks[:context], len(toks) + k + 1)
        with torch.inference_mode(): d.feats.normal_(generator=None)
        for r in range(reps + 1):
            t0 = time.perf_counter(); d.propose(toks[:context + 2 * r], k, pick)
            if r: times.append(time.perf_counter() - t0)                   # the first round feeds the whole prompt
    return sorted(times)[len(times) // 2]
