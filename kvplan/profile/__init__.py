"""`kvplan profile`: vLLM 0.17.1's start-up on one device (snapshot, load, profile run, budget,
sizing, allocation) and the record it produces.

    run.py     run_profile(ProfileOptions(...)) -> ProfileResult   (imports torch)
    record.py  profile_record / save_profile / load_profile / profile_mismatches (never imports torch)
    render.py  render_profile(record) for people"""
