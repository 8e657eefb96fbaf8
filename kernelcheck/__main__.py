from kernelcheck.cli import entry

entry()
