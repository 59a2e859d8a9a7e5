import pytest

from flightdeck.domain.allowlist import Allowlist, AllowlistError, UnknownServiceError


def test_parses_entries_splitting_on_the_first_colon():
    allow = Allowlist.parse("orchestrator:http://127.0.0.1:8080, worker:https://w.example.com/prod/ ")
    assert allow.resolve("orchestrator") == "http://127.0.0.1:8080"
    assert allow.resolve("worker") == "https://w.example.com/prod"


def test_empty_entries_and_spaces_are_ignored():
    assert Allowlist.parse(" , a:http://h:1 ,, ").services == {"a": "http://h:1"}
    assert Allowlist.parse("").services == {}


@pytest.mark.parametrize("text", [
    "a",                               # no colon
    "a:",                              # no URL
    ":http://h",                       # no name
    "a:ftp://h",                       # not http(s)
    "a:http://user:pw@h",              # user-info
    "a:http://h/?q=1",                 # query
    "a:http://h/#frag",                # fragment
    "a:http://",                       # no host
    "a:http://h:99999",                # bad port
    "a:http://h,a:http://i",           # duplicate name
    "http://evil:http://h",            # a URL as a name
    "a b:http://h",                    # space in a name
])
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
