import pytest

from flightdeck.domain.allowlist import Allowlist, AllowlistError, UnknownServiceError


def test_parses_entries_splitting_on_the_first_colon():
    allow = Allowlist.parse("orchestrator:http://127.0.0.1:8080, worker:https://w.example.com/prod/ ")
    assert allow.resolve("orchestrator") == "http://127.0.0.1:8080"
    assert allow.resolve("worker") == "https://w.example.com/prod"


def test_empty_entries_and_spaces_are_ignored():
    assert Allowlist.parse(" , a:http://h:1 ,, ").services == {"a": "http://h:1"}
    assert Allowlist.parse("").services == {}


@pytest.mark.parametrize(
    "text",
    [
        "a",  # no colon
        "a:",  # no URL
        ":http://h",  # no name
        "a:ftp://h",  # not http(s)
        "a:http://user:pw@h",  # user-info
        "a:http://h/?q=1",  # query
        "a:http://h/#frag",  # fragment
        "a:http://",  # no host
        "a:http://h:99999",  # bad port
        "a:http://h,a:http://i",  # duplicate name
        "http://evil:http://h",  # a URL as a name
        "a b:http://h",  # space in a name
    ],
)
def test_malformed_entries_are_refused(text):
    with pytest.raises(AllowlistError):
        Allowlist.parse(text)


@pytest.mark.parametrize("name", ["unknown", "http://127.0.0.1:8080", "", "ORCHESTRATOR", None])
def test_unknown_names_and_raw_urls_are_refused(name):
    allow = Allowlist.parse("orchestrator:http://127.0.0.1:8080")
    with pytest.raises(UnknownServiceError):
        allow.resolve(name)


def test_allows_url_only_under_a_listed_base():
    allow = Allowlist.parse("a:https://h.example.com/prod")
    assert allow.allows_url("https://h.example.com/prod/api/x")
    assert not allow.allows_url("https://h.example.com/prodx")
    assert not allow.allows_url("http://h.example.com/prod/api")
    assert not allow.allows_url("https://user@h.example.com/prod/api")
    assert not allow.allows_url("https://evil.example.com/prod/api")


# --- normalisation before the check (issue 12, defect 6) ---------------------------------------

import requests  # noqa: E402  (only to show the client sends exactly the checked URL)
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flightdeck.domain.allowlist import normalise_url  # noqa: E402

HOOKS = Allowlist.parse("hooks:http://h/hooks")


@pytest.mark.parametrize(
    "url",
    [
        "http://h/hooks/../admin/reset",
        "http://h/hooks/%2e%2e/admin/reset",
        "http://h/hooks/%2E%2E/admin/reset",
        "http://h/hooks/.%2e/admin/reset",
        "http://h/hooks/a/../../admin",
        "http://h/hooks/..",
        "http://h/hooks%2f..%2fadmin",  # escaped slash
        "http://h/hooks/..%2Fadmin",
        "http://h/hooks/%5c..%5cadmin",  # escaped backslash
        "http://h/hooks\\..\\admin",  # backslashes
        "http://h/hooks/%252e%252e/admin",  # double encoding
        "http://h/hooks/..;/admin",  # ".." to servers that strip path parameters
        "http://h/hooks/%zz",  # a stray percent sign
        "http://h/hooks/a b",
        "http://h/hooks/a\tb",
        "http://h/hooks/\x00",
        "http://h@evil/hooks/x",
        "http://h/../hooks/x",  # above the root
    ],
)
def test_dot_segments_and_escaped_separators_never_leave_the_base(url):
    assert HOOKS.check_url(url) is None
    assert not HOOKS.allows_url(url)


@pytest.mark.parametrize(
    "url,sent",
    [
        ("http://h/hooks/a", "http://h/hooks/a"),
        ("http://h/hooks", "http://h/hooks"),
        ("HTTP://H:80/hooks/./a/b/../c?x=%41&y=1#frag", "http://h/hooks/a/c?x=A&y=1"),
        ("http://h/hooks/%7euser/%e2%82%ac", "http://h/hooks/~user/%E2%82%AC"),
        ("http://h/hooks/é", "http://h/hooks/%C3%A9"),
        ("http://h/hooks/x/%2e%2e/y", "http://h/hooks/y"),  # resolved, and still inside
    ],
)
def test_a_clean_sub_path_passes_in_its_normalised_form_which_the_client_sends_unchanged(url, sent):
    assert HOOKS.check_url(url) == sent
    assert requests.Request("POST", sent).prepare().url == sent


@pytest.mark.parametrize("text", ["a:http://h/x/../y", "a:http://h/%2e%2e/y", "a:http://h/x%2fy", "a:http://h\\x"])
def test_ambiguous_base_urls_are_refused(text):
    with pytest.raises(AllowlistError):
        Allowlist.parse(text)


_SEGMENT = st.sampled_from(
    ["hooks", "a", ".", "..", "%2e", "%2E%2e", ".%2e", "%2f", "%5c", "x;y", "..;", "", "%41", "é", "%25", "~"]
)


@given(st.lists(_SEGMENT, max_size=8), st.sampled_from(["", "?q=1", "?a=%2e", "#f"]))
def test_what_passes_is_inside_the_base_free_of_dot_segments_and_a_fixed_point(segments, tail):
    url = "http://h/" + "/".join(segments) + tail
    checked = HOOKS.check_url(url)
    if checked is None:
        return
    path = checked.split("?")[0][len("http://h") :]
    assert path == "/hooks" or path.startswith("/hooks/")
    assert not {".", ".."} & {s.split(";")[0] for s in path.split("/")}
    assert "%2F" not in checked.upper() and "%5C" not in checked.upper() and "\\" not in checked
    assert normalise_url(checked) == checked
    assert requests.Request("POST", checked).prepare().url == checked
