"""The routes of the OpenAI-compatible profiles (:mod:`.profiles`): per profile, its
authentication rule, scripted leading errors, then the OpenAI Files + Batches handlers
(:class:`~mmirage_beam.providers.openai.fake.OpenAIApi`) bound to that profile."""

from __future__ import annotations

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map
from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.openai.fake import OpenAIApi
from mmirage_beam.providers.openai.fake_profiles import PROFILES, Profile
from mmirage_beam.providers.openai.fake_service import FILES_AND_BATCHES, OPENAI
from mmirage_beam.testing.fake_provider.routing import route_rules
from mmirage_beam.testing.fake_provider.store import Store
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
    error_response,
    json_response,
    status_error,
)

AZURE_401_MESSAGE = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API "
    "endpoint for your resource."
)

_ROUTES = Map(route_rules(FILES_AND_BATCHES), strict_slashes=False)


class ProfileApi:
    """One profile's routes: authentication, scripted leading errors, then the OpenAI
    handlers (an :class:`~mmirage_beam.providers.openai.fake.OpenAIApi` bound to
    the profile, so its files and batches are its own)."""

    def __init__(self, store: Store, profile: Profile) -> None:
        self.store = store
        self.profile = profile
        self.api = OpenAIApi(store, profile=profile)

    def serves(self, path: str) -> bool:
        """Whether ``path`` is this profile's: under its ``api_prefix`` or, for a profile
        with ``data_plane_paths``, under its ``prefix``."""
        prefix = self.profile.prefix if self.profile.data_plane_paths else self.profile.api_prefix
        return path.startswith(prefix + "/")

    def handle(self, request: Request) -> Response:
        """Answers a request :meth:`serves` accepted."""
        if request.path.startswith(self.profile.api_prefix + "/"):
            path = request.path[len(self.profile.api_prefix) :]
        else:  # Azure's data plane: /openai/files?api-version=..., /openai/batches...
            path = request.path[len(self.profile.prefix) :]
            if not request.args.get("api-version"):
                # REST reference: api-version is a required query parameter there.
                return json_response(
                    {"error": {"code": "404", "message": "Resource not found"}}, 404
                )
        try:
            endpoint, args = _ROUTES.bind("fake").match(path, method=request.method)
        except HTTPException as exc:
            return error_response(
                OPENAI,
                ApiError(
                    exc.code or 404, "invalid_request_error", f"{request.method} {request.path}"
                ),
            )
        name = f"{self.profile.name}:{endpoint}"
        with self.store.lock:
            self.store.call_counts[name] = self.store.call_counts.get(name, 0) + 1
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        bearer = scheme.lower() == "bearer" and bool(token.strip())
        if self.profile.api_key_header:
            # Azure: the api-key header or a Bearer key/Entra token (the v1 API's OpenAI
            # client sends the key as Bearer); without either, Azure's 401 object
            # {"error": {"code": "401", "message": ...}}.
            if not (bearer or request.headers.get("api-key", "").strip()):
                return json_response({"error": {"code": "401", "message": AZURE_401_MESSAGE}}, 401)
        elif not bearer:
            return error_response(OPENAI, ApiError(401, "invalid_request_error", "Invalid API Key"))
        try:
            leading = self.store.take_leading_error(endpoint)
            if leading is not None:
                raise status_error(OPENAI, *leading, f"leading error on {endpoint}", args)
            return getattr(self.api, endpoint)(request, **args)
        except ApiError as err:
            return error_response(OPENAI, err)


#: profile -> its name on the start-up line
_LABELS = {"azure-openai": "Azure OpenAI", "groq": "Groq", "together": "Together"}


class CompatibleFake:
    """The OpenAI-compatible services (``azure-openai``, ``groq``, ``together``), each
    under its own prefix (:mod:`~mmirage_beam.providers.openai.fake_profiles`)."""

    provider_names = tuple(PROFILES)
    labels = tuple((_LABELS.get(name, name), name) for name in PROFILES)

    def __init__(self, store: Store) -> None:
        self.apis = [ProfileApi(store, profile) for profile in PROFILES.values()]

    def claims(self, request: Request) -> bool:
        """A path under one profile's prefix."""
        return any(api.serves(request.path) for api in self.apis)

    def handle(self, request: Request) -> Response:
        """Answers with the profile whose prefix the path is under."""
        for api in self.apis:
            if api.serves(request.path):
                return api.handle(request)
        raise AssertionError("handle() of a request claims() refused")  # pragma: no cover

    def base_url(self, root: str, provider: str) -> str:
        """``<root>/<prefix>/v1``, the openai SDK's ``base_url`` for the profile."""
        return root + PROFILES[provider].api_prefix
