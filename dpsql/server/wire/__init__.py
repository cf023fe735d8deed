"""The PostgreSQL wire protocol (3.0) as data and pure functions: its codes, its types, its
messages framed and read, values in text and binary, the extended protocol's state, COPY's
formats and SCRAM. No sockets, threads or sessions here: serving (server/listener.py, app.py,
transport.py, login.py, messages.py, the supervisor and workers) does the I/O and uses this."""
