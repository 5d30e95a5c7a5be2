"""Chat on the default model (SmolLM2-135M-Instruct, chatml template) through
the openai client: streamed equals non-streamed, and the answer is sensible."""
import openai


def test_chat_stream_equals_nonstream(smollm2_server):
    c = openai.OpenAI(base_url=smollm2_server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = c.models.list().data[0].id
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    full = c.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    assert full.object == "chat.completion"
    assert full.choices[0].message.role == "assistant"
    assert "Paris" in text
    assert full.usage.prompt_tokens > 10  # the template and its default system prompt are there

    stream = c.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    got, roles, usage, finish = "", [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            got += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert roles == ["assistant"]
    assert got == text
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens

    lp = c.chat.completions.create(model=model, messages=msgs, max_tokens=4, temperature=0, logprobs=True,
                                   top_logprobs=2)
    content = lp.choices[0].logprobs.content
    assert len(content) == lp.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
