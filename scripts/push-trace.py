#!/usr/bin/env python3
"""Per-layer timeline of push / layer-wise requests from -Dkvtransfer.pushTrace=true output.

Usage: KVTRANSFER_JAVA_OPTS=-Dkvtransfer.pushTrace=true kvtransfer demo ... 2> trace.txt
       scripts/push-trace.py trace.txt
Times are ms since the request's first event: mark (engine marked the layer ready), seen (the sender took it),
pushed (its writes completed remotely), gen-notice (the generation side got its layer notice and checked its
entries), then the request's other events (move, before-done, done-sent, all-done, checked).
"""
import collections
import sys

ev = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if not line.startswith('PT '):
        continue
    _, role, req, e, layer, t = line.split()[:6]
    ev[req].append((int(t), role, e, int(layer)))
for req, es in ev.items():
    es.sort()
    t0 = es[0][0]
    by = collections.defaultdict(dict)
    other = []
    for t, role, e, layer in es:
        if e in ('mark', 'ready-seen', 'pushed', 'notice1'):
            by[e][layer] = t
        else:
            other.append((t, role, e, layer))
    print('request', req)
    for layer in sorted(by['mark']):
        cell = lambda e: '%8.1f' % ((by[e][layer] - t0) / 1e6) if layer in by[e] else '       -'
        took = ('%6.1f' % ((by['pushed'][layer] - by['ready-seen'][layer]) / 1e6)
                if layer in by['pushed'] and layer in by['ready-seen'] else '     -')
        print('  L%2d mark %s seen %s pushed %s gen-notice %s  push took %s' % (
            layer, cell('mark'), cell('ready-seen'), cell('pushed'), cell('notice1'), took))
    for t, role, e, layer in other:
        print('  %s %s %d at %.1f' % (role, e, layer, (t - t0) / 1e6))
