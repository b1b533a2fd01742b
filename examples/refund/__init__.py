"""What every refund agent of the examples shares: framework-free, importable as ``refund`` from examples/.

- :mod:`.dialogue`: the customer's messages (``SCRIPT``) and the dialogue's rules, the deterministic "model"
  behind the scripted models;
- :mod:`.workflow`: the durable refund workflow, the agents' tools;
- :mod:`.agents`: what the webhook needs from an agent, and finding a framework's agent
  (``examples/<framework>_agent.py``);
- :mod:`.scripted_langgraph`, :mod:`.scripted_adk`, :mod:`.scripted_openai_agents`: the dialogue's rules as each
  framework's model class (no API key);
- :mod:`.services`: the payment, email and WhatsApp Cloud API stand-ins;
- :mod:`.webhook`: the WhatsApp webhook service, one per worker process;
- :mod:`.proxy`, :mod:`.cluster`, :mod:`.report`: the crash demo's load balancer, moving parts and audit
  (``examples/demo.py`` runs them);
- :mod:`.in_process`: plays the dialogue in one process, a new store per message (``python
  examples/<framework>_agent.py``).
"""
