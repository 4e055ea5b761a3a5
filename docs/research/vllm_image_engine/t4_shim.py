"""t2_preprocessed.py in the peer venv (torch 2.13.0+cpu, no torchvision), with the
/tmp/i25/plugin general plugin on PYTHONPATH:
    PYTHONPATH=/tmp/i25/plugin build/peer-venv/bin/python t4_shim.py MODEL CHAT_JSON OUT kind [engine-json]"""
import asyncio, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":
    import t2_preprocessed
    asyncio.run(t2_preprocessed.main())
