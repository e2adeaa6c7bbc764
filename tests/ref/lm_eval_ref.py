#!/usr/bin/env python3
"""Reference for pp-eval: EleutherAI lm-evaluation-harness (lm-eval) run on
local task files, with the prompts and per-choice log-likelihoods it computed.

    PYTHON lm_eval_ref.py --model HF_DIR --tasks-dir DIR --out OUT.json
                          [--limit N] [--batch-size B] [--bootstrap-iters N]

PYTHON is the venv of scripts/setup-eval-env.sh (lm-eval over Debian's torch
1.13, CPU). HF_DIR is a Hugging Face model directory (config.json, weights,
tokenizer). DIR holds the task data the test wrote, one JSON-lines file per
task, named by task; only the files present are run:

    hellaswag.jsonl   ind, activity_label, ctx_a, ctx_b, ctx, endings (4),
                      label, source_id, split, split_type (Rowan/hellaswag)
    arc_easy.jsonl    id, question, choices {"text": [..], "label": [..]},
                      answerKey (allenai/ai2_arc)
    boolq.jsonl       question, passage, idx, label 0/1 (super_glue boolq)
    winogrande.jsonl  sentence (with "_"), option1, option2, answer "1"/"2"
    lambada.jsonl     text (EleutherAI/lambada_openai)
    piqa.jsonl        goal, sol1, sol2, label 0/1

Each task is lm-eval's own built-in definition (hellaswag, arc_easy, boolq,
winogrande, lambada_openai, piqa): a YAML written in a temporary directory
`include:`s the installed built-in YAML (so its doc_to_text, doc_to_choice,
doc_to_target, process_docs and metrics, !function utils included, are used
as they are) and only replaces the data source with the local file
(dataset_path: json, data_files) under the split the built-in task evaluates
(its test_split if it has one, else validation_split), with no other split.
Everything runs offline (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE; a private
datasets cache in the temporary directory).

The model is lm-eval's "hf" (HFLM) with pretrained=HF_DIR,dtype=float32 on
device cpu, batch size 1 by default (batches > 1 pad and can change the last
bits), 0-shot, lm-eval's default seeds and bootstrap_iters (100000, used for
the perplexity stderr of lambada).

OUT.json:
    {"lm_eval_version": "0.4.13", "transformers_version": ..., "torch_version": ...,
     "model_args": "pretrained=...,dtype=float32",
     "lm": {"max_length": 2048, "prefix_token_id": 1, "add_bos_token": null,
            "bos_token_id": 1, "encode_adds_bos": true},
     "tasks": {"hellaswag": {
         "lm_eval_task": "hellaswag", "n": 3,
         "metrics": {"acc": .., "acc_stderr": .., "acc_norm": .., ...},
         "items": [{"doc_id": 0, "target": 2,
                    "requests": [{"context": "...", "continuation": "...",
                                  "ll": -12.3, "is_greedy": false}, ...],
                    "item_metrics": {"acc": 0.0, "acc_norm": 1.0}}, ...]}}}

metrics: the numbers lm-eval reports for the task (its "alias" and "name"
left out), the ",none" filter suffix stripped; sample_len is the number of
documents. acc_stderr is the sample standard deviation / sqrt(n); lambada's
perplexity_stderr is lm-eval's bootstrap (100 chunks of 1000 resamples, chunk
i drawn with random.Random(i).choices, then the sample standard deviation of
the 100000 perplexities), so it is reproducible exactly from the lls. items: in doc order; requests in choice order, context and
continuation exactly as lm-eval built them (the samples' "arguments"; the
model moves trailing spaces of the context to the continuation before
tokenizing). target: for multiple-choice tasks the gold choice index (for
winogrande lm-eval's sample "target" is the shared continuation and the gold
index comes from doc_to_text; that string is kept as "lm_eval_target"), for
lambada the target string. lm.encode_adds_bos: whether HFLM's tok_encode of
a non-empty context starts with the tokenizer's BOS.

lm-eval writes progress bars and "bootstrapping for stddev" lines on stdout
and stderr: redirect both. Exit status 0 on success, 2 on bad input, 1 when
lm-eval failed.
"""
import argparse
import json
import math
import os
import sys
import tempfile

# name of the data file (without .jsonl) -> lm-eval's built-in task and its YAML
TASKS = {
    "hellaswag": ("hellaswag", "hellaswag/hellaswag.yaml"),
    "arc_easy": ("arc_easy", "arc/arc_easy.yaml"),
    "boolq": ("boolq", "super_glue/boolq/default.yaml"),
    "winogrande": ("winogrande", "winogrande/default.yaml"),
    "lambada": ("lambada_openai", "lambada/lambada_openai.yaml"),
    "piqa": ("piqa", "piqa/piqa.yaml"),
}


def die(msg, code=2):
    print(f"lm_eval_ref: {msg}", file=sys.stderr)
    sys.exit(code)


def builtin_yaml(path):
    """The built-in task YAML as data, its !function tags kept as strings."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    with open(path, "rb") as f:
        return yaml.load(f, Loader=Loader)  # noqa: S506 (SafeLoader subclass)


def write_task_yaml(incdir, name, builtin_path, data_file):
    """A task named `name` that is the built-in one over `data_file`."""
    import yaml

    cfg = builtin_yaml(builtin_path)
    if "include" in cfg:  # none of the six has one; the splits could then be there
        die(f"{builtin_path} includes another YAML: update lm_eval_ref.py", 1)
    split = cfg.get("test_split") or cfg.get("validation_split")
    if not split:
        die(f"{builtin_path} names neither a test nor a validation split", 1)
    over = {
        "include": builtin_path,
        "task": name,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {split: os.path.abspath(data_file)}},
        "training_split": None,
        "validation_split": split if split == cfg.get("validation_split") else None,
        "test_split": split if split == cfg.get("test_split") else None,
        "fewshot_split": None,
        "num_fewshot": 0,
    }
    with open(os.path.join(incdir, f"{name}.yaml"), "w") as f:
        yaml.safe_dump(over, f, sort_keys=False)
    return split


def finite_or_none(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("--tasks-dir", required=True, help="directory of TASK.jsonl files")
    ap.add_argument("--out", required=True, help="output JSON")
    ap.add_argument("--limit", type=int, default=None, help="first N documents of each task")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--bootstrap-iters", type=int, default=100000,
                    help="lm-eval's bootstrap_iters (its default; perplexity stderr)")
    a = ap.parse_args()

    if not os.path.isfile(os.path.join(a.model, "config.json")):
        die(f"{a.model}: no config.json (not a Hugging Face model directory)")
    present = [t for t in TASKS if os.path.isfile(os.path.join(a.tasks_dir, t + ".jsonl"))]
    if not present:
        die(f"{a.tasks_dir}: none of {', '.join(t + '.jsonl' for t in TASKS)}")

    tmp = tempfile.TemporaryDirectory(prefix="pp-lm-eval-")
    # before datasets / transformers / lm_eval are imported
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_DATASETS_CACHE"] = os.path.join(tmp.name, "datasets-cache")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    import lm_eval
    import lm_eval.api.registry
    import torch
    import transformers
    from lm_eval.tasks import TaskManager

    tasks_root = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    incdir = os.path.join(tmp.name, "tasks")
    os.makedirs(incdir)
    names = {}
    for t in present:
        name, rel = TASKS[t]
        path = os.path.join(tasks_root, rel)
        if not os.path.isfile(path):
            die(f"lm-eval {lm_eval.__version__} has no {rel}", 1)
        write_task_yaml(incdir, name, path, os.path.join(a.tasks_dir, t + ".jsonl"))
        names[t] = name

    model_args = f"pretrained={os.path.abspath(a.model)},dtype=float32"
    # as simple_evaluate makes it from model="hf", model_args=...; made here so
    # that its max_length and BOS handling can be reported
    lm = lm_eval.api.registry.get_model("hf").create_from_arg_string(
        model_args, {"batch_size": a.batch_size, "max_batch_size": None, "device": "cpu"})
    tm = TaskManager(include_path=incdir, include_defaults=False,
                     metadata={"pretrained": os.path.abspath(a.model), "dtype": "float32"})
    # One simple_evaluate per task, over the one model: in a call of several
    # tasks lm-eval 0.4.13 groups the requests of all of them by context, and
    # with the six together some two-token Lambada continuations came out
    # unlike the same task run alone (-19.03 against -9.17; a full forward
    # of the text, and pp-eval, give the latter).
    res = {"results": {}, "samples": {}, "configs": {}}
    for name in names.values():
        r = lm_eval.simple_evaluate(
            model=lm, tasks=[name], num_fewshot=0, batch_size=a.batch_size,
            device="cpu", limit=a.limit, log_samples=True, task_manager=tm,
            bootstrap_iters=a.bootstrap_iters)
        if r is None:
            die(f"simple_evaluate returned nothing for {name}", 1)
        for k in res:
            res[k].update(r.get(k, {}))

    # the same task objects again, for the gold index of multiple-input tasks
    loaded = tm.load(list(names.values()))["tasks"]
    task_objs = {}
    for key, obj in loaded.items():
        task_objs[getattr(obj.config, "task", key)] = obj

    probe = lm.tok_encode("Hello")
    out = {
        "lm_eval_version": lm_eval.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "model_args": model_args,
        "batch_size": a.batch_size,
        "lm": {
            "max_length": lm.max_length,
            "prefix_token_id": lm.prefix_token_id,
            "add_bos_token": lm.add_bos_token,
            "bos_token_id": lm.tokenizer.bos_token_id,
            "encode_adds_bos": bool(probe) and probe[0] == lm.tokenizer.bos_token_id,
        },
        "tasks": {},
    }
    for t, name in names.items():
        if name not in res["results"] or name not in res["samples"]:
            die(f"lm-eval returned no results for {name}", 1)
        metrics = {}
        for k, v in res["results"][name].items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue  # "alias", "name"
            k = k[: -len(",none")] if k.endswith(",none") else k
            metrics[k] = finite_or_none(v)
        task = task_objs.get(name)
        mc = res["configs"][name].get("output_type") == "multiple_choice"
        items = []
        for s in sorted(res["samples"][name], key=lambda s: s["doc_id"]):
            reqs = []
            for args, resp in zip(s["arguments"], s["filtered_resps"], strict=True):
                ll, greedy = resp
                reqs.append({"context": args[0], "continuation": args[1],
                             "ll": float(ll), "is_greedy": bool(greedy)})
            item = {"doc_id": s["doc_id"], "target": s["target"], "requests": reqs}
            if mc and task is not None and getattr(task, "multiple_input", False):
                item["lm_eval_target"] = s["target"]
                item["target"] = task.doc_to_text(s["doc"])
            if mc and not isinstance(item["target"], int):
                die(f"{name} doc {s['doc_id']}: gold index {item['target']!r} is not an int", 1)
            item["item_metrics"] = {m: s[m] for m in s.get("metrics", []) if m in s}
            items.append(item)
        out["tasks"][t] = {
            "lm_eval_task": name,
            "n": len(items),
            "metrics": metrics,
            "items": items,
        }

    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False, default=str)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
