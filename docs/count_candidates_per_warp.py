"""What Tag's grid search costs per warp, by cell size (docs/benchmarks.md, "Why sizing cells by k moved nothing").

Steps 40 Tag envs (10 + 100 agents, k = 2) with random actions on the CPU backend, as the
benchmark does on the GPU, and replays `_find_neighbors`' stopping rule (cuda/tag.py) in
numpy on their positions. A warp runs each loop as long as its longest lane, so for each
warp of 32 cell-sorted lanes it reports the 3 x 3-cell loop's longest lane, whether any
lane searches further rings, and the longest lane's ring candidates.

    python docs/count_candidates_per_warp.py     # ~5 minutes on 2 cores
"""
import numpy as np, torch
from torchrl_warp.bench import make_env
E, L, K = 40, 20.0, 2
env = make_env("tag", E, "cpu", "10+100", K)
pool = [env.full_action_spec.rand() for _ in range(8)]
td = env.reset(); snaps = {}
for i in range(160):
    out, td = env.step_and_maybe_reset(td.update(pool[i % 8]))
    if i in (5, 80, 155):
        snaps[i] = (env.state["pos"].numpy().copy(), env.state["in_game"].numpy().copy())

def search(p, g, k=K):
    """Replays _find_neighbors' stopping rule; per agent in cell order: (block count, rings, ring candidates)."""
    n = len(p); size = L / g
    cell = np.minimum((p / size).astype(int), g - 1)
    order = np.argsort(cell[:, 1] * g + cell[:, 0], kind="stable")
    out = []
    for a in order:
        cx, cy = cell[a]; d2 = ((p - p[a]) ** 2).sum(1); d2[a] = np.inf
        r = 1; block = None; ring_cands = 0
        while True:
            x0, x1, y0, y1 = max(cx - r, 0), min(cx + r, g - 1), max(cy - r, 0), min(cy + r, g - 1)
            inside = (cell[:, 0] >= x0) & (cell[:, 0] <= x1) & (cell[:, 1] >= y0) & (cell[:, 1] <= y1)
            inside[a] = False; m = inside.sum()
            if block is None: block = m
            else: ring_cands = m - block
            if m == n - 1 or (x0 == 0 and y0 == 0 and x1 == g - 1 and y1 == g - 1): break
            bound = 4 * L * g
            if x0 > 0: bound = min(bound, p[a, 0] - x0 * size)
            if x1 < g - 1: bound = min(bound, (x1 + 1) * size - p[a, 0])
            if y0 > 0: bound = min(bound, p[a, 1] - y0 * size)
            if y1 < g - 1: bound = min(bound, (y1 + 1) * size - p[a, 1])
            if m >= k and np.sort(d2[inside])[k - 1] < bound * bound: break
            r += 1
        out.append((block, r - 1, ring_cands))
    return np.array(out)

for step, (pos, ing) in snaps.items():
    print(f"step {step}: {ing.sum(1).mean():.0f} agents in the game per env")
    for per_cell in (1, 2, 3, 4, 6, 8):
        n_avg = 110
        g = max(1, round((n_avg / per_cell) ** 0.5))
        bm, ringw, rc, agent_ring = [], [], [], []
        for e in range(E):
            s = search(pos[e][ing[e]], g)
            agent_ring.append((s[:, 1] > 0).mean())
            for w in range(0, len(s), 32):
                ws = s[w:w + 32]
                bm.append(ws[:, 0].max()); ringw.append((ws[:, 1] > 0).any()); rc.append(ws[:, 2].max())
        print(f"  ~{per_cell}/cell G={g:2d}: block max {np.mean(bm):5.1f}, agents needing rings {np.mean(agent_ring):5.1%}, "
              f"warps with a ring {np.mean(ringw):5.1%}, ring candidates max {np.mean(rc):5.1f}, "
              f"warp loop length ~{np.mean(bm) + np.mean(rc):5.1f}")
