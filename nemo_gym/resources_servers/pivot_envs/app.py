"""NeMo Gym resources server ``pivot_envs``: a policy's turn at a pivot, scored by pivot-envs' verifiers.

NeMo Gym's runner starts it as it starts its own servers (``python app.py`` in this folder, the config in
``configs/pivot_envs.yaml``); NeMo RL starts it when that config is listed in its ``env.nemo_gym.config_paths``.

``POST /verify`` takes NeMo Gym's verify body (``BaseVerifyRequest``: ``responses_create_params`` and the policy's
``response``, plus the row's ``expected_action`` or ``expected_output``) and answers the body plus ``reward``
(NeMo Gym's ``BaseVerifyResponse``) and pivot-envs' ``passed``, ``reason``, ``error``, ``verifier`` (and
``step_rewards``/``step_errors`` for an episode row). The work is :func:`pivot_envs.serve.nemo_gym.verify_body_text`,
the same function behind ``pivot-envs serve``'s ``/verify``: one implementation, two hosts. A body that NeMo Gym's
model rejects is FastAPI's 422; one that pivot-envs cannot score is a 422 whose ``detail`` names the field.

Config keys (beside NeMo Gym's own): ``verifier``, a pivot-envs verifier spec (a name such as ``tool_call``, or a
config object; ``null``: each pivot's domain default), and ``pivot_domain``, the domain of rows that carry none.
"""

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import ConfigDict, PrivateAttr
from starlette.concurrency import run_in_threadpool

from pivot_envs.serve.nemo_gym import BodyError, verify_body_text
from pivot_envs.verifiers.batch import VerifierResolver


class PivotEnvsResourcesServerConfig(BaseResourcesServerConfig):
    verifier: Any | None = None
    pivot_domain: str = "tool_use"


class PivotEnvsVerifyRequest(BaseVerifyRequest):
    """NeMo Gym's verify body; the row's other fields (``expected_action``, ``id``, ``pivot_envs``...) pass through."""

    model_config = ConfigDict(extra="allow")


class PivotEnvsVerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")

    passed: bool
    reason: str
    error: str | None = None
    verifier: str | None = None


class PivotEnvsResourcesServer(SimpleResourcesServer):
    config: PivotEnvsResourcesServerConfig
    _resolver: VerifierResolver | None = PrivateAttr(default=None)

    def setup_webserver(self) -> FastAPI:
        self._resolver = VerifierResolver(self.config.verifier)  # a bad spec fails here, at start
        app = super().setup_webserver()

        @app.exception_handler(BodyError)
        async def _body_error(request: Request, exc: BodyError) -> JSONResponse:
            return JSONResponse(status_code=422, content={"detail": exc.detail()})

        return app

    async def verify(self, request: Request, body: PivotEnvsVerifyRequest) -> PivotEnvsVerifyResponse:
        # ``body`` is NeMo Gym's check of the request; the answer is built from the request's own bytes.
        raw = await request.body()
        _, content = await run_in_threadpool(verify_body_text, raw, self._resolver, self.config.pivot_domain)
        return Response(content, media_type="application/json")


if __name__ == "__main__":
    PivotEnvsResourcesServer.run_webserver()
