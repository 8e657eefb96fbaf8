"""Commands of the ``kernelcheck`` CLI that live in their own modules."""
