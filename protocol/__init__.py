"""Sans-IO Kafka protocol code: frames, headers, messages, record batches, index files.

Nothing here touches sockets, files, clocks or an event loop; every function works on
``bytes``/``memoryview`` so that it can be tested by feeding input whole or byte by byte.
"""
