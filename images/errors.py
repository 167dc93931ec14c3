"""The one error of the image build: a message for people (the failed tool's own words included)."""


class ImageError(Exception):
    pass
