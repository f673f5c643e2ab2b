"""A prequential run: the loop, its rejections, predictions, delayed labels, metrics and the watch over its start."""
