"""predict.segments: the hit tokens a warm request skips in whole prefill segments."""
