"""Corpus BLEU and chrF (sacreBLEU) against every reference of each sentence."""


from data_prep.pair_tokens import normalize


def bleu_scores(hypotheses, references):
    """Corpus sacreBLEU and chrF, standard and normalized, against all references.

    `references[i]` lists every translation of sentence `i`. Standard scores compare
    the text as written (cased, punctuated; sacreBLEU's 13a tokenizer); normalized
    scores lowercase and strip punctuation on both sides first, the form the
    tutorial's word-level models produce.
    """
    import sacrebleu

    depth = max(map(len, references))
    streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(depth)]

    def normalized(texts):
        return [None if text is None else normalize(text) for text in texts]

    norm_streams = [normalized(stream) for stream in streams]
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, streams).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, streams).score,
        "normalized_bleu": sacrebleu.corpus_bleu(normalized(hypotheses), norm_streams).score,
        "normalized_chrf": sacrebleu.corpus_chrf(normalized(hypotheses), norm_streams).score,
    }
