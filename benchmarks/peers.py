"""`python benchmarks/peers.py ours|llama.cpp`: start a peer server on a free loopback port, print its URL,
and keep it up until Ctrl-C (the code lives in `tgi.server.bench.peers`). To benchmark peers, prefer
`tgi benchmark serving --start ours --start llama.cpp --start transformers`, which starts and stops them."""

import argparse
import shlex
import sys
import time

from tgi.server.bench import peers


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("peer", choices=("ours", "llama.cpp"))
    p.add_argument("--model-id", default=None, help="model (llama.cpp: a GGUF; default: the default model's)")
    p.add_argument("--llama-server", default=None, help="llama-server binary (default: from PATH)")
    p.add_argument("--threads", type=int, default=peers.LLAMA_THREADS)
    p.add_argument("--args", default="", help="extra arguments for the server (one string)")
    args = p.parse_args(argv)
    extra = shlex.split(args.args)
    if args.peer == "ours":
        server = peers.start_ours(args.model_id, extra)
    else:
        binary = peers.find_llama_server(args.llama_server)
        if binary is None:
            print("llama-server not found (PATH or --llama-server)", file=sys.stderr)
            return 2
        gguf = args.model_id or peers.default_gguf()
        server = peers.start_llama_server(binary, gguf, threads=args.threads, extra_args=extra)
    print(f"{server.name} ready on {server.url} (log: {server.log_path}); Ctrl-C stops it", flush=True)
    try:
        while server.proc.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
