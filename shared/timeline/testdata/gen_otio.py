# Writes the OTIO golden files of shared/timeline's tests with
# OpenTimelineIO's own library (pip install opentimelineio).
import opentimelineio as otio

A = "aivedio://assets/0190c0de-0000-7000-8000-00000000000a"
B = "aivedio://assets/0190c0de-0000-7000-8000-00000000000b"
C = "aivedio://assets/0190c0de-0000-7000-8000-00000000000c"
M = "aivedio://assets/0190c0de-0000-7000-8000-0000000000aa"

def rt(seconds, rate=30):
    return otio.opentime.RationalTime(seconds * rate, rate)

def clip(name, url, start, dur, rate=30):
    return otio.schema.Clip(name=name, media_reference=otio.schema.ExternalReference(target_url=url),
                            source_range=otio.opentime.TimeRange(rt(start, rate), rt(dur, rate)))

def three_clips():
    tl = otio.schema.Timeline(name="three clips")
    v = otio.schema.Track(name="V1", kind=otio.schema.TrackKind.Video)
    v.append(clip("a", A, 1, 3))
    v.append(otio.schema.Transition(transition_type=otio.schema.TransitionTypes.SMPTE_Dissolve, in_offset=rt(0.5), out_offset=rt(0.5)))
    v.append(clip("b", B, 2, 4))
    v.append(otio.schema.Gap(source_range=otio.opentime.TimeRange(rt(0), rt(1))))
    v.append(clip("c", C, 0, 2))
    a = otio.schema.Track(name="A1", kind=otio.schema.TrackKind.Audio)
    a.append(clip("bed", M, 0, 10))
    tl.tracks.append(v)
    tl.tracks.append(a)
    tl.metadata["aivedio"] = {"titles": [{"text": "Hello", "start": 0.5, "end": 2.5}], "audio": {"gain_db": -6}}
    return tl

def no_handles():
    tl = otio.schema.Timeline(name="no handles")
    v = otio.schema.Track(name="V1", kind=otio.schema.TrackKind.Video)
    v.append(clip("a", A, 0, 3))
    v.append(otio.schema.Transition(transition_type=otio.schema.TransitionTypes.SMPTE_Dissolve, in_offset=rt(1), out_offset=rt(0.5)))
    v.append(clip("b", B, 0, 4))  # starts at 0: nothing before it for the in_offset
    tl.tracks.append(v)
    return tl

def wipe():
    tl = otio.schema.Timeline(name="wipe")
    v = otio.schema.Track(name="V1", kind=otio.schema.TrackKind.Video)
    v.append(clip("a", A, 1, 3))
    v.append(otio.schema.Transition(transition_type="SMPTE_Wipe", in_offset=rt(0.5), out_offset=rt(0.5)))
    v.append(clip("b", B, 2, 4))
    tl.tracks.append(v)
    return tl

for name, tl in [("three_clips", three_clips()), ("no_handles", no_handles()), ("wipe", wipe())]:
    print(name, "track duration", tl.tracks[0].duration().to_seconds())
    otio.adapters.write_to_file(tl, name + ".otio")
