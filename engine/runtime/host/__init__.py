"""The runtime's one room for what it changes in the host process and its OS, apart from the
model, runner and KV-cache core: glibc's malloc settings and heap trim (malloc), the huge-page
re-exec (hugepages), giving back mapped weight pages (residency) and ONNX Runtime's thread
spinning by machine load (spin). Process-wide effects start here and nowhere else.
"""
