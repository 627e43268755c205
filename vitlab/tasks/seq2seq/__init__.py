from .config import Seq2SeqConfig
from .task import Seq2SeqTask, exact_accuracy, label_smoothed_loss, load_seq2seq_run, translate

__all__ = ["Seq2SeqConfig", "Seq2SeqTask", "exact_accuracy", "label_smoothed_loss", "load_seq2seq_run", "translate"]
