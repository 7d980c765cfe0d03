"""Virtual time: every process of an embedded run advances fabric time together.

A conservative window protocol (SliceTime, NSDI'11; Chandy-Misra's
lookahead): the runner's ``Coordinator`` opens windows ``[T, T + L)`` of
fabric time, ``T`` the earliest thing due anywhere (an idle stretch is
skipped, not slept through) and ``L`` the smallest lookahead of the
fabric's links (propagation plus the serialization of the smallest frame:
``lookahead_ns``). Each process (a switch, a pack of switches, a host agent
or a pack of them) is a *member*: its loop runs as it always does, through
its injected clock, and the ``VirtualClock`` (``member.py``) lets it handle
every event and frame due before the window's end, at its exact time; then
reports when its next event is and how many frames it sent on each link,
and waits for the next window.

Frames still cross the real veths. A frame is handed to its link when its
serialization starts (then nothing can stop it: ``link.CommitWire``) with
its arrival time in a 12-byte trailer past the frame (``trailer.py``); no
frame sent in a window arrives before the window's end. At a window's start
a member reads its sockets until it holds every frame sent to it (the
coordinator gives the count) into per-port inboxes ordered by arrival time;
its loop's reads (``VirtualPort.recv``) see a frame only once the clock
reaches its arrival. Ties between ports are the loop's own rule, never the
order of socket reads: a rerun is the same run, bit for bit.
"""
