"""The ``chat_params`` bag: its defaults, a request's values laid over them, an empty bag being
the defaults themselves (no copy), and the media kwargs of a request that sends none."""

from __future__ import annotations

from renderer.chat import ChatParams


def test_chat_params_defaults_and_overlay():
    p = ChatParams.from_request(None)
    assert (p.add_generation_prompt, p.continue_final_message, p.chat_template_content_format) == (True, False, "auto")
    base = ChatParams(chat_template_kwargs={"enable_thinking": True, "x": 1})
    p = base.with_request(
        {
            "chat_template_kwargs": {"enable_thinking": False, "x": None, "y": "auto"},
            "documents": [{"title": "t", "text": "x"}],
            "add_generation_prompt": False,
        }
    )
    assert p.chat_template_kwargs == {"enable_thinking": False, "x": 1}
    assert p.documents == [{"title": "t", "text": "x"}]
    assert p.template_kwargs(p.documents) == {
        "enable_thinking": False,
        "x": 1,
        "add_generation_prompt": False,
        "continue_final_message": False,
        "documents": [{"title": "t", "text": "x"}],
    }


def test_an_empty_chat_params_bag_is_the_defaults():
    from renderer.chat import ChatParams

    assert ChatParams.from_request({}) is ChatParams.from_request(None)  # the shortcut, taken
    assert ChatParams.from_request({}) == ChatParams()
    assert ChatParams().with_request({}) == ChatParams()


def test_media_kwargs_of_a_request_without_any_are_empty():
    from renderer.chat import ChatParams
    from renderer.chat_stage import MediaKwargs

    assert MediaKwargs.of(ChatParams()) == MediaKwargs()
    assert MediaKwargs.of(ChatParams()) is MediaKwargs.of(ChatParams())  # the shared empty one
    sent = ChatParams.from_request({"mm_processor_kwargs": {"max_pixels": 3136}})
    assert MediaKwargs.of(sent) == MediaKwargs({"max_pixels": 3136}, None)
