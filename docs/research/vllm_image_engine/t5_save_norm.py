import os, sys
sys.path.insert(0, "/tmp/i25")
from t1_chat import image
import t2_preprocessed as t
for (w, h, s) in [(300, 200, 1), (640, 480, 2)]:
    t.processed(image(w, h, s), "fast", "/tmp/i25/models/tiny-qwen2_vl-h32")
print("saved")
