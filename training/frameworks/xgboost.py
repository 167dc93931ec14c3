"""The built-in trainer of ``framework: xgboost``: distributed gradient boosting under Ray Train's XGBoostTrainer.

Ray's XGBoostTrainer (V2) starts a Rabit tracker and wraps this function in xgboost's ``CommunicatorContext``, so
each worker's ``xgboost.train`` on its own shard builds the same trees from all-reduced histograms. Tabular data:
the images flattened to pixel features. An "epoch" is one boosting round; the booster is checkpointed every
``checkpoint.everyEpochs`` rounds and training continues from it (``xgb_model=``) after a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from training.errors import CheckpointError
from training.frameworks.base import Framework

if TYPE_CHECKING:
    from training.runtime.worker import WorkerContext

MODEL_FILE = "model.ubj"


def train(ctx: WorkerContext) -> None:
    import os

    import xgboost as xgb

    shard = ctx.data()
    x_tr, y_tr, x_va, y_va = shard.tabular()
    dtrain = xgb.DMatrix(x_tr, label=y_tr)
    dval = xgb.DMatrix(x_va, label=y_va)
    params = {
        "objective": "multi:softprob",
        "num_class": shard.num_classes,
        "eval_metric": ["mlogloss", "merror"],
        "tree_method": "hist",
        "max_depth": 6,
        "eta": ctx.lr,
        "seed": ctx.seed,
        "nthread": ctx.threads,
    }
    params.update(ctx.xgboost)
    booster = None

    def load(directory: str) -> None:
        nonlocal booster
        booster = xgb.Booster()
        booster.load_model(ctx.checkpoint_file(MODEL_FILE))

    if not ctx.restore(load) and ctx.rank == 0:
        ctx.log(f"xgboost {params['tree_method']} max_depth={params['max_depth']} eta={params['eta']}: "
                f"{ctx.world_size} worker(s) x {len(x_tr)} rows x {x_tr.shape[1]} features ({shard.source}); "
                f"xgboost collective world size {xgb.collective.get_world_size()}")

    def save(directory: str) -> None:
        booster.save_model(os.path.join(directory, MODEL_FILE))

    def evaluate():
        # Distributed evaluation: xgboost all-reduces the metric over every worker's shard.
        text = booster.eval_set([(dval, "val")])
        vals = dict(part.split(":") for part in text.split()[1:])
        return {"val_loss": float(vals["val-mlogloss"]), "val_accuracy": 1.0 - float(vals["val-merror"])}

    for epoch in ctx.epochs():
        ctx.batch_hook(epoch, 0, 1)
        evals_result: dict[str, Any] = {}
        booster = xgb.train(params, dtrain, num_boost_round=1, xgb_model=booster,
                            evals=[(dtrain, "train"), (dval, "val")], evals_result=evals_result, verbose_eval=False)
        metrics = {
            "loss": evals_result["train"]["mlogloss"][-1],
            "accuracy": 1.0 - evals_result["train"]["merror"][-1],
            "val_loss": evals_result["val"]["mlogloss"][-1],
            "val_accuracy": 1.0 - evals_result["val"]["merror"][-1],
            "trees": int(booster.num_boosted_rounds()),
        }
        ctx.report(epoch, metrics, save=save)

    if not ctx.trained_epochs:
        if booster is None:
            raise CheckpointError("no epochs to train and no model to evaluate")
        ctx.record_evaluation(evaluate())


# ---------------------------------------------------------------- under Ray Train

def ray_trainer(run_worker, job, **common):
    from ray.train.xgboost import XGBoostTrainer

    return XGBoostTrainer(run_worker, **common)


FRAMEWORK = Framework(
    name="xgboost", epochs=50, batch_size=64, lr=0.3,
    metrics=("loss", "accuracy", "val_loss", "val_accuracy", "trees"),
    loop=train, ray_trainer=ray_trainer, builtin_model=False, params_block="xgboost")
