"""Epoch-by-epoch progress of a gensim model's training (Word2Vec, FastText, Doc2Vec)."""

from gensim.models.callbacks import CallbackAny2Vec


class EpochProgress(CallbackAny2Vec):
    """Advances a tqdm progress bar at the end of each epoch."""

    def __init__(self, progress):
        super().__init__()
        self.progress = progress

    def on_epoch_end(self, model):
        self.progress.update()
