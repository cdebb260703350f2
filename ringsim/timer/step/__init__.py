"""A whole training step around attention: the models (``models``), their memory per device
(``memory``, with what the frameworks take first in ``frameworks``)."""
