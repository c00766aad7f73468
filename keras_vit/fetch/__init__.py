"""Fetching files into a local cache: presets' URLs (:mod:`~keras_vit.fetch.cache`, through the one download path
:mod:`~keras_vit.fetch.transfer`), ``hf://`` repositories (:mod:`~keras_vit.fetch.hub`) and ``kaggle://`` handles
(:mod:`~keras_vit.fetch.kaggle`). What a fetched file holds is read one floor up, in :mod:`keras_vit.weights`.
"""
