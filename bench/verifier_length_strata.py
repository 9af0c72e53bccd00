"""Lexical verifier AUROC on HaluEval-QA test within bins of candidate-answer length (is it only the length artifact?)."""
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fspo_lite.verifiers.lexical import LexicalVerifier
from fspo_lite.verifiers.quality import auroc
from fspo_lite.verifiers.benchmark import halueval_claim
rows=[json.loads(l) for l in open(Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'halueval_qa_test.jsonl')]
v=LexicalVerifier()
sc=v.score([r["knowledge"] for r in rows],[halueval_claim(r["question"],r["candidate"]) for r in rows],[r["question"] for r in rows])
bins=collections.defaultdict(list)
for r,s in zip(rows,sc):
    n=len(r["candidate"].split()); b = "1-2" if n<=2 else "3-5" if n<=5 else "6-9" if n<=9 else "10+"
    bins[b].append((0.5 if s is None else s, not r["candidate_is_hallucinated"]))
for b in ["1-2","3-5","6-9","10+"]:
    xs=bins[b]; pos=sum(l for _,l in xs)
    print(b, len(xs), "supported", pos, "AUROC", round(auroc([s for s,_ in xs],[l for _,l in xs]),3) if 0<pos<len(xs) else None)
