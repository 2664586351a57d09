# Present only so that older pip versions can do an editable install; all
# metadata lives in setup.cfg.
from setuptools import setup

setup()
