"""Fine-tuning the dual encoder with the multiple-negatives ranking loss (Henderson et
al., 2017): in a batch of (query, relevant document) pairs, every other query's
document, and a hard negative per query (`pairs.py`), is a negative; the loss is the
cross-entropy of picking the right document among them from the scaled cosine
similarities. `fine_tune` trains through the core's run lifecycle (`TrainingRun.fit`),
with the trainer below as its custom model.
"""

import keras

from workflows.core.config import ConfigError
from workflows.retrievers import pairs
from workflows.retrievers.dense import xla


class DualEncoderTrainer(keras.Model):
    """Scores each query against every document of its batch (its own relevant one at
    the same row, then the others and the hard negatives): `(batch, documents)` logits,
    the cosine similarities times `scale`. Trained with cross-entropy against one-hot
    targets on the diagonal, this is the multiple-negatives ranking loss; a target may
    also share its mass between a query's document and its hard negative (soft labels).

    With `chunk_size`, a training step is the cached form of that loss (GradCache, Gao
    et al., 2021), so memory no longer grows with the batch: the batch is embedded
    `chunk_size` texts at a time without gradients; the loss's gradient with respect to
    each embedding is computed from those; then each chunk is embedded again and its
    share of the weights' gradient back-propagated, one chunk after the other. The
    gradient is the whole batch's, exactly, provided both passes see the same network:
    so they run without dropout. On JAX a scan and on TensorFlow a while loop run the
    chunks; on PyTorch a Python loop (eager, as PyTorch trains)."""

    def __init__(self, encoder_model, scale=20.0, chunk_size=0, **kwargs):
        super().__init__(**kwargs)
        self.encoder, self.scale, self.chunk_size = encoder_model, scale, chunk_size

    def call(self, inputs, training=False):
        queries = self.encoder([inputs["query_ids"], inputs["query_mask"]], training=training)
        documents = self.encoder([inputs["document_ids"], inputs["document_mask"]],
                                 training=training)
        return self.scale * keras.ops.matmul(queries, keras.ops.transpose(documents))

    def train_step(self, *args):
        if not self.chunk_size:
            return super().train_step(*args)
        if keras.backend.backend() == "jax":
            return self._jax_cached_step(*args)
        if keras.backend.backend() == "tensorflow":
            return self._tensorflow_cached_step(*args)
        return self._torch_cached_step(*args)

    def _cached_loss(self, embed, inputs, targets):
        """`(logits, loss, chunks)`: the whole batch embedded chunk by chunk without
        gradients, and for each side its chunked `(ids, mask, loss gradient)`."""
        sides = [(inputs["query_ids"], inputs["query_mask"]),
                 (inputs["document_ids"], inputs["document_mask"])]
        chunked = [(_chunks(ids, self.chunk_size), _chunks(mask, self.chunk_size))
                   for ids, mask in sides]
        queries, documents = (keras.ops.stop_gradient(keras.ops.reshape(
            keras.ops.map(lambda chunk: embed(*chunk), side), (-1, self.encoder.output_shape[-1])))
            for side in chunked)
        logits, loss, gradients = multiple_negatives_gradients(queries, documents, self.scale,
                                                               targets)
        return logits, loss, [(*side, _chunks(gradient, self.chunk_size))
                              for side, gradient in zip(chunked, gradients, strict=True)]

    def _jax_cached_step(self, state, data):
        import jax

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)

        def embed(ids, mask, weights=trainable):
            return self.encoder.stateless_call(weights, non_trainable, [ids, mask],
                                               training=False)[0]

        def add_chunk(total, chunk):
            ids, mask, upstream = chunk
            grads = jax.grad(lambda w: keras.ops.sum(embed(ids, mask, w) * upstream))(trainable)
            return jax.tree.map(lambda a, b: a + b, total, grads), None

        logits, loss, chunks = self._cached_loss(embed, inputs, labels)
        grads = jax.tree.map(keras.ops.zeros_like, trainable)
        for side in chunks:  # a scan: one chunk's activations at a time
            grads = jax.lax.scan(add_chunk, grads, side)[0]
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable)
        logs, metrics_variables = self._stateless_metrics(metrics_variables, loss, labels,
                                                          logits)
        return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)

    def _tensorflow_cached_step(self, data):
        import tensorflow as tf

        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)
        weights = self.trainable_variables

        def embed(ids, mask):
            return self.encoder([ids, mask], training=False)

        def add_chunk(index, total, side):
            ids, mask, upstream = (part[index] for part in side)
            with tf.GradientTape() as tape:
                surrogate = tf.reduce_sum(embed(ids, mask) * upstream)
            grads = tape.gradient(surrogate, [w.value for w in weights],  # tf.Variables
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return index + 1, [a + tf.convert_to_tensor(g)
                               for a, g in zip(total, grads, strict=True)]

        logits, loss, chunks = self._cached_loss(embed, inputs, labels)
        grads = [tf.zeros_like(w) for w in weights]
        for side in chunks:  # one chunk at a time (parallel_iterations=1)
            grads = tf.while_loop(lambda i, _, side=side: i < tf.shape(side[0])[0],
                                  lambda i, total, side=side: add_chunk(i, total, side),
                                  (tf.constant(0), grads), parallel_iterations=1)[1]
        self.optimizer.apply(grads, weights)
        self._update_metrics(loss, labels, logits)
        return self.get_metrics_result()

    def _torch_cached_step(self, data):
        import torch

        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)
        weights = [w.value for w in self.trainable_variables]  # torch Parameters

        def embed(ids, mask):
            with torch.no_grad():  # (no graph kept: the second pass makes each chunk's)
                return self.encoder([ids, mask], training=False)

        logits, loss, chunks = self._cached_loss(embed, inputs, labels)
        grads = [torch.zeros_like(w) for w in weights]
        for ids, mask, upstream in chunks:  # one chunk's activations at a time
            for index in range(ids.shape[0]):
                surrogate = torch.sum(self.encoder([ids[index], mask[index]], training=False)
                                      * upstream[index])
                parts = torch.autograd.grad(surrogate, weights, allow_unused=True)
                grads = [total if part is None else total + part
                         for total, part in zip(grads, parts, strict=True)]
        self.optimizer.apply(grads, self.trainable_variables)
        self._update_metrics(loss, labels, logits)
        return self.get_metrics_result()

    def _update_metrics(self, loss, labels, logits):
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(labels, logits)

    def _stateless_metrics(self, metrics_variables, loss, labels, logits):
        logs, updated = {}, []
        for metric in self.metrics:
            own = metrics_variables[len(updated):len(updated) + len(metric.variables)]
            own = metric.stateless_update_state(own, loss) if metric.name == "loss" \
                else metric.stateless_update_state(own, labels, logits)
            result = metric.stateless_result(own)
            logs.update(result if isinstance(result, dict) else {metric.name: result})
            updated += own
        return logs, updated


def chunk_dividing(batch_size, chunk_size):
    """The largest chunk of at most `chunk_size` rows that divides `batch_size` (0: none)."""
    return next((size for size in range(min(chunk_size, batch_size), 0, -1)
                 if batch_size % size == 0), 0)


def _chunks(tensor, size):
    """`tensor`'s rows as `(rows / size, size, ...)`."""
    return keras.ops.reshape(tensor, (-1, size, *keras.ops.shape(tensor)[1:]))


def multiple_negatives_gradients(queries, documents, scale, targets):
    """`(logits, loss, (d loss / d queries, d loss / d documents))` of the multiple-
    negatives ranking loss (`targets`: each query's distribution over the documents), in
    closed form: the softmax cross-entropy's gradient with respect to the logits is
    `(p - targets) / batch`."""
    logits = scale * keras.ops.matmul(queries, keras.ops.transpose(documents))
    targets = keras.ops.cast(targets, logits.dtype)
    log_p = keras.ops.log_softmax(logits, axis=-1)
    batch = keras.ops.cast(keras.ops.shape(logits)[0], "float32")
    loss = -keras.ops.sum(targets * log_p) / batch
    upstream = (keras.ops.exp(log_p) - targets) * (scale / batch)
    return logits, loss, (keras.ops.matmul(upstream, documents),
                          keras.ops.matmul(keras.ops.transpose(upstream), queries))


def compile_trainer(encoder, learning_rate, scale, chunk_size=0):
    """The trainer of `encoder`, compiled (AdamW; the backbone's pooler, which mean
    pooling does not read, frozen); `chunk_size`: see `DualEncoderTrainer`."""
    encoder.backbone.get_layer("pooled_dense").trainable = False
    trainer = DualEncoderTrainer(encoder.model, scale, chunk_size)
    trainer.compile(optimizer=keras.optimizers.AdamW(learning_rate, weight_decay=0.01),
                    jit_compile=True if xla() else "auto",
                    loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                    metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")])
    return trainer


def fine_tune(training, config, data, encoder, bm25, work_dir):
    """Fine-tunes `encoder` in place through `training` (a `training.TrainingRun`): pairs and
    hard negatives made once, then resumable epochs, the best by validation nDCG@10
    (of the validation pool: `evaluation.validation_ndcg`)."""
    import mlflow

    from workflows.core import tracking
    from workflows.core.stopping import Monitor
    from workflows.retrievers import evaluation, pseudo_queries

    made = pairs.training_pairs(config, data, pairs.hybrid_answers(
        config, data, encoder, bm25, work_dir)
        if config.pseudo_queries == "hybrid_answers" else None)
    negatives = pairs.hard_negatives(
        pairs.candidate_rows(config, data, made, encoder, bm25, work_dir), made.pairs,
        made.judged_rows, config.negatives_depth, config.seed, len(data.doc_ids))
    shares = None
    if config.answer_temperature:
        negatives, shares = pseudo_queries.soft_targets(negatives, made.rivals,
                                                        config.answer_temperature)
    if config.positives == "passages":
        made, negatives = pairs.passage_pairs(config, data, encoder, made, negatives,
                                              work_dir)
    query_tokens = encoder.tokenizer.ids(made.query_texts, config.query_length)
    document_tokens = encoder.tokenizer.ids(made.documents, config.document_length)

    def epoch_batches(epoch):
        return pairs.QueryDocumentBatches(
            query_tokens, document_tokens, made.pairs, negatives, config.batch_size,
            config.query_length, config.document_length, config.seed + epoch,
            sources=made.sources, shares=shares)

    first = epoch_batches(0)
    if not len(first):
        raise ConfigError(f"No batch of {config.batch_size} pairs, no document twice in it, "
                          f"can be made of these {len(made.pairs):,} pairs: lower --set "
                          "batch_size.")
    trainer = compile_trainer(encoder, config.learning_rate, config.scale,
                              chunk_dividing(config.batch_size, config.chunk_size))
    # built on one pair of the first batch (a whole batch at once holds a gigabyte), so
    # that a checkpoint can be restored into it
    trainer({name: part[:1] for name, part in first[0][0].items()})
    validate = evaluation.validation_ndcg(config, data, encoder, bm25, made.held_out)
    run_id = mlflow.active_run().info.run_id
    if not mlflow.MlflowClient().get_metric_history(run_id, "val_pool_ndcg_at_10"):
        tracking.log_epoch(-1, {"val_pool_ndcg_at_10": validate()})  # step 0: before training
    state = training.fit(epoch_batches, None, len(made.pairs),
                         epoch_end=lambda epoch, metrics: metrics.update(
                             val_pool_ndcg_at_10=validate()),
                         curves=("loss", "pool_ndcg_at_10"), model=trainer,
                         monitor=Monitor("val_pool_ndcg_at_10", higher_is_better=True))
    print(f"Fine-tuned on {len(made.pairs):,} pairs: best validation-pool nDCG@10 "
          f"{state.history[state.best_epoch - 1]['val_pool_ndcg_at_10']:.4f} at epoch "
          f"{state.best_epoch}")
