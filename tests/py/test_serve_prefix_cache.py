"""Prompt reuse in `loom serve`: the second turn of a chat with a ~1,000-token system prompt
starts at least 5x sooner than the first (its prefix is in a slot's KV cells), even with an
unrelated request served in between (eviction takes the empty or least recently used slot),
its greedy reply equals an uncached server's, and /metrics counts the hits."""
import time

import openai
import pytest
import requests

from conftest import LoomServer, model_path

SYSTEM = ("You are a patient assistant for a small public library. " +
          " ".join(f"Rule {i}: answer questions about opening hours, loans, renewals and fines politely, "
                   f"and never invent a book title that is not in the catalogue." for i in range(1, 32)))


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


def ttft_and_text(server, messages, max_tokens=24):
    t0 = time.perf_counter()
    first, text = None, ""
    for chunk in client(server).chat.completions.create(model="x", messages=messages, max_tokens=max_tokens,
                                                        temperature=0, stream=True):
        for ch in chunk.choices:
            if ch.delta.content:
                if first is None:
                    first = time.perf_counter() - t0
                text += ch.delta.content
    return first, text


def metrics(server):
    out = {}
    for line in requests.get(server.url + "/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_second_turn_reuses_the_system_prompt(loom_bin):
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "When do you open on Saturdays?"}]
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "2", "-c", "2048") as server:
        n_prompt = client(server).chat.completions.create(model="x", messages=turn1, max_tokens=1,
                                                          temperature=0).usage.prompt_tokens
        assert 900 <= n_prompt <= 1400, n_prompt
        # That request warmed the slot; a cold start is measured with a system prompt of its own.
        cold_msgs = [{"role": "system", "content": SYSTEM.replace("patient", "friendly")}, turn1[1]]
        ttft1, reply1 = ttft_and_text(server, cold_msgs)
        # Something unrelated in between: it must not evict the conversation's slot.
        client(server).completions.create(model="x", prompt="Unrelated: 1, 2, 3,", max_tokens=4, temperature=0)
        turn2 = cold_msgs + [{"role": "assistant", "content": reply1},
                             {"role": "user", "content": "And how long can I keep a book?"}]
        before = metrics(server)
        ttft2, reply2 = ttft_and_text(server, turn2)
        after = metrics(server)
        print(f"\nsystem prompt {n_prompt} tokens: TTFT first turn {ttft1 * 1e3:.0f} ms, second turn "
              f"{ttft2 * 1e3:.0f} ms, ratio {ttft1 / ttft2:.1f}x")
        assert ttft1 >= 5 * ttft2, (ttft1, ttft2)
        assert after["loom_prefix_cache_hits_total"] == before["loom_prefix_cache_hits_total"] + 1
        assert after["loom_prompt_tokens_reused_total"] - before["loom_prompt_tokens_reused_total"] >= n_prompt - 10
        assert 0 < after["loom_prefix_cache_hit_ratio"] <= 1
        assert after["loom_prefix_cache_lookups_total"] >= 4
    # The same second turn on a fresh server (nothing cached) gives the same greedy reply.
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "2", "-c", "2048") as fresh:
        _, uncached = ttft_and_text(fresh, turn2)
        assert metrics(fresh)["loom_prompt_tokens_reused_total"] == 0
    assert reply2 == uncached


def test_choices_and_busy_slots_share_prompt_cells(loom_bin):
    """A request whose system prompt sits in a busy slot copies those cells from there; with n > 1
    the choices after the first copy the prompt's cells from its slot once it is read. Greedy
    replies equal a fresh server's (the copied cells are the computed ones, bit for bit)."""
    import threading
    system = [{"role": "system", "content": SYSTEM}]
    ask = system + [{"role": "user", "content": "Can I renew a loan online?"}]
    other = system + [{"role": "user", "content": "Do you charge fines for late returns?"}]
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "3", "-c", "2048") as server:
        # A long generation keeps the only slot holding the system prompt busy.
        streamer = threading.Thread(target=lambda: client(server).chat.completions.create(
            model="x", messages=ask, max_tokens=300, temperature=0, extra_body={"ignore_eos": True}))
        streamer.start()
        deadline = time.time() + 120
        while metrics(server)["loom_generated_tokens_total"] < 2 and time.time() < deadline:
            time.sleep(0.1)
        before = metrics(server)
        ttft, reply = ttft_and_text(server, other)
        after = metrics(server)
        copied = after["loom_prefix_cache_copied_tokens_total"] - before["loom_prefix_cache_copied_tokens_total"]
        print(f"\ncopied {copied:.0f} cells from a busy slot; TTFT {ttft * 1e3:.0f} ms")
        assert after["loom_slots_busy"] >= 1 and copied >= 900
        streamer.join()
        # n = 3 with a prompt no slot holds yet: choices 1 and 2 copy choice 0's prompt cells.
        fresh_ask = [{"role": "system", "content": SYSTEM.replace("library", "city library")}, ask[1]]
        before = metrics(server)
        r = client(server).chat.completions.create(model="x", messages=fresh_ask, max_tokens=8, temperature=0, n=3)
        after = metrics(server)
        n_prompt = r.usage.prompt_tokens
        assert after["loom_prefix_cache_copied_tokens_total"] - before["loom_prefix_cache_copied_tokens_total"] \
            == 2 * (n_prompt - 1)
        texts = [c.message.content for c in r.choices]
        assert texts[0] == texts[1] == texts[2]
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "1", "-c", "2048") as fresh:
        assert ttft_and_text(fresh, other)[1] == reply
        assert client(fresh).chat.completions.create(model="x", messages=fresh_ask, max_tokens=8,
                                                     temperature=0).choices[0].message.content == texts[0]


def test_choices_share_cells_on_the_hrx_cpu_device(loom_bin):
    """The same sharing on `--device cpu` (HRX: the copy is a device-to-device copy per layer)."""
    ask = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Can I renew a loan online?"}]
    with LoomServer(loom_bin, model_path("smollm2"), "--device", "cpu", "--parallel", "2", "-c", "2048") as server:
        r = client(server).chat.completions.create(model="x", messages=ask, max_tokens=8, temperature=0, n=2)
        assert metrics(server)["loom_prefix_cache_copied_tokens_total"] == r.usage.prompt_tokens - 1
        texts = [c.message.content for c in r.choices]
    with LoomServer(loom_bin, model_path("smollm2"), "--device", "cpu", "--parallel", "1", "-c", "2048") as fresh:
        solo = client(fresh).chat.completions.create(model="x", messages=ask, max_tokens=8, temperature=0)
    assert texts == [solo.choices[0].message.content] * 2
